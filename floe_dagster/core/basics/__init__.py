"""The words every part of the core uses: table names and patterns, shards, field checks, durations,
sizes, wall-clock times, the masking rule, Floe's key spelling. Imports nothing of the core."""
