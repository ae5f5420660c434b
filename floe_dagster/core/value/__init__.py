"""What maintenance bought: the runs as the learned ranking reads them, the learned ranking, the
static and learned orders side by side, the value report. Imports runs and what lies below."""
