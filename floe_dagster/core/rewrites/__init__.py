"""What a rewrite takes and proves: byte estimates, partition scopes and their where, the row check,
the row proof, the rollback, the rules that decide which files a rewrite takes. Imports facts,
core/operation_config.py (a kind's config, read as its base) and what lies below."""
