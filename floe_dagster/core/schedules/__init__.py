"""When work is due: schedules, cron, the quiet period, SLAs, the after-write trigger and the
writers, the adaptive orphan cadence. Imports basics and facts."""
