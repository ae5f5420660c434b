"""What floe-dagster knows of a table: the fact catalogue, the measurements, statistics, table
properties, health, branches and tags, the debt score, snapshot expiry's defaults.
Imports basics and storage."""
