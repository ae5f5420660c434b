"""Where a table's files live: storage locations, the keys that steer FileIO, object storage, a table's
own location checked against the lake, the quarantine of orphans. Imports basics."""
