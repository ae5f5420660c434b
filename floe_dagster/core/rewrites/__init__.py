"""What a rewrite takes and proves: byte estimates, partition scopes and their where, the row check,
the row proof, the rollback. Imports basics and facts."""
