"""When a rewrite whose rows changed may be rolled back (core/rewrites/rollback.py): only when nothing but the
run's own snapshots lies on top of the snapshot it started from."""

from floe_dagster.core.rewrites.rollback import rollback_target

# 1 <- 2 <- 3 <- 4: each snapshot's parent.
PARENTS = {1: None, 2: 1, 3: 2, 4: 3}
OPS = {1: "append", 2: "append", 3: "replace", 4: "replace"}


def test_only_our_snapshots_on_top_rolls_back_to_the_one_before_them():
    verdict = rollback_target(4, PARENTS, {3, 4}, OPS)
    assert verdict.target == 2 and "snapshot 2 (append)" in verdict.reason
    assert rollback_target(3, {1: None, 2: 1, 3: 2}, {3}).target == 2


def test_a_writer_on_top_is_never_rolled_back_over():
    verdict = rollback_target(4, PARENTS, {3}, {**OPS, 4: "append"})
    assert verdict.target is None
    assert verdict.reason == "another writer committed snapshot 4 (append) on top of this run's commits"


def test_a_writer_between_our_commits_is_never_dropped():
    verdict = rollback_target(4, PARENTS, {2, 4}, {**OPS, 3: "delete"})
    assert verdict.target is None and verdict.reason == "another writer's snapshot 3 (delete) lies between this run's commits"


def test_a_writer_before_our_first_commit_is_what_the_run_started_from():
    # 2 landed after the run read the table but before its commit: the rewrite started from it.
    assert rollback_target(4, PARENTS, {3, 4}).target == 2


def test_parents_the_metadata_does_not_keep_cannot_be_made_current():
    # Nessie keeps only the current snapshot in the metadata.
    verdict = rollback_target(4, {4: 3}, {4})
    assert verdict.target is None and "no longer in the table's metadata" in verdict.reason
    assert rollback_target(4, {3: 2}, {4}).target is None
    assert rollback_target(None, PARENTS, {4}).target is None
    assert rollback_target(4, PARENTS, set()).target is None
