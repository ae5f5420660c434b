"""Policies: the model, its files and formats, trigger conditions, the safety envelope, owner
overrides, the set that says which policy governs a table, a table's health record under it.
Imports runs and what lies below."""
