"""Adaptive orphan cadence, the pure half (core/schedules/orphan_cadence.py): the next cleanup timed from the
orphan rate past cleanups found, clamped to [min, max], with the "why" explain shows (an injected
clock); ``orphanCleanup.adaptive`` in both policy formats, and sizes as policies write them."""

from __future__ import annotations

import json
import textwrap
from datetime import datetime, timedelta, timezone

import pytest

from floe_dagster.core.operations import Operation
from floe_dagster.core.schedules.orphan_cadence import AdaptiveCadence, OrphanRunFigures, next_orphan_run
from floe_dagster.core.policies.policy import PolicyError, parse_policies_text
from floe_dagster.core.policies.policy_formats import to_loader_policy
from floe_dagster.core.basics.sizes import parse_size

GIB = 1024**3
NOW = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
CADENCE = AdaptiveCadence(GIB, "P1D", "P90D")


def cleanups(*found: tuple[float, float]) -> list[OrphanRunFigures]:
    """Cleanups finished ``days`` before NOW that found ``gib`` of orphans, from (days ago, gib)."""
    return [OrphanRunFigures(NOW - timedelta(days=days), int(gib * GIB)) for days, gib in found]


def test_the_rate_of_past_cleanups_times_the_next_one():
    # 4 periods of 5 days, 1 GiB each: 0.2 GiB/day; a 1 GiB target → every 5 days after the last cleanup.
    runs = cleanups((25, 0.3), (20, 1), (15, 1), (10, 1), (5, 1))
    verdict = next_orphan_run(CADENCE, runs, NOW)
    assert verdict.rate_bytes_per_day == pytest.approx(0.2 * GIB)
    assert verdict.cleanups == 4 and verdict.clamped is None
    assert verdict.interval == timedelta(days=5)
    assert verdict.next_run_at == NOW  # the last cleanup was 5 days ago
    assert verdict.why == ("expected next run at 2026-11-26T12:00:00+00:00: 0.2 GiB/day of orphans observed over 4 "
                           "cleanups, 1 GiB target → every 5 days")
    assert verdict.due(NOW) and not verdict.due(NOW - timedelta(seconds=1))
    assert verdict.to_json() == {"nextRunAt": "2026-11-26T12:00:00+00:00", "interval": "P5D",
                                 "orphanBytesPerDay": round(0.2 * GIB), "cleanups": 4, "clamped": None,
                                 "why": verdict.why}


def test_a_ratio_of_sums_weighs_each_period_by_its_length():
    # 2 GiB over 1 day, then 0 over 9 days: 0.2 GiB/day (not the mean of 2 and 0 per day).
    verdict = next_orphan_run(CADENCE, cleanups((20, 0), (19, 2), (10, 0)), NOW)
    assert verdict.rate_bytes_per_day == pytest.approx(0.2 * GIB)
    assert verdict.next_run_at == NOW - timedelta(days=5)  # overdue: due at the very next tick


def test_the_interval_is_clamped_to_min_and_max_and_says_so():
    busy = next_orphan_run(CADENCE, cleanups((2, 0), (1, 5)), NOW)  # 5 GiB/day: every 0.2 days wanted
    assert busy.interval == timedelta(days=1) and busy.clamped == "min"
    assert busy.why.endswith("5 GiB/day of orphans observed over 1 cleanup, 1 GiB target → every 4.8 hours, "
                             "raised to the minimum P1D")
    slow = next_orphan_run(CADENCE, cleanups((60, 0), (30, 0.1)), NOW)  # 1/300 GiB/day: every 300 days
    assert slow.interval == timedelta(days=90) and slow.clamped == "max"
    assert slow.why.endswith("lowered to the maximum P90D")
    none = next_orphan_run(CADENCE, cleanups((60, 0), (30, 0)), NOW)
    assert none.interval == timedelta(days=90) and none.rate_bytes_per_day == 0
    assert none.why.endswith("0 GiB/day of orphans observed over 1 cleanup, no orphans found → the maximum P90D")
    assert none.next_run_at == NOW + timedelta(days=60)


def test_without_a_measurable_rate_the_table_starts_measuring():
    first = next_orphan_run(CADENCE, [], NOW)
    assert first.next_run_at == NOW and first.due(NOW) and first.interval is None
    assert first.why.startswith("due now: no orphan cleanup recorded yet")
    one = next_orphan_run(CADENCE, cleanups((3, 0.5)), NOW)
    assert one.next_run_at == NOW - timedelta(days=2) and one.clamped == "min"
    assert "one cleanup recorded (0.5 GiB found) and no earlier one" in one.why
    # Knowing since when the first cleanup's orphans piled up (the table's creation) gives a rate at once.
    known = next_orphan_run(CADENCE, cleanups((3, 0.5)), NOW, observed_since=NOW - timedelta(days=8))
    assert known.rate_bytes_per_day == pytest.approx(0.1 * GIB) and known.interval == timedelta(days=10)


def test_failed_cleanups_are_left_out_and_only_the_newest_periods_count():
    runs = cleanups((30, 0), (20, 1), (10, 1))
    runs.append(OrphanRunFigures(NOW - timedelta(days=15), 50 * GIB, succeeded=False))
    assert next_orphan_run(CADENCE, runs, NOW).rate_bytes_per_day == pytest.approx(0.1 * GIB)
    # A table whose writers changed: 30 quiet periods long ago, then 10 busy ones; only the 10 newest count.
    old = [(60 - i, 0.0) for i in range(31)]  # days 60 to 30: 30 periods of a day, nothing found
    new = [(29 - i, 1.0) for i in range(10)]  # days 29 to 20: 1 GiB a day
    verdict = next_orphan_run(CADENCE, cleanups(*old, *new), NOW)
    assert verdict.cleanups == 10 and verdict.rate_bytes_per_day == pytest.approx(GIB)


def test_stored_times_without_a_zone_are_utc_and_the_clock_must_have_one():
    naive = [OrphanRunFigures(datetime(2026, 11, 16, 12), GIB // 10), OrphanRunFigures(datetime(2026, 11, 21, 12), GIB)]
    assert next_orphan_run(CADENCE, naive, NOW).interval == timedelta(days=5)
    with pytest.raises(ValueError, match="aware"):
        next_orphan_run(CADENCE, [], datetime(2026, 11, 26))


def test_sizes_as_policies_write_them():
    assert parse_size("1GiB") == GIB == parse_size("1 gib") == parse_size(1073741824)
    assert parse_size("1.5GB") == 1_500_000_000 and parse_size("512 MiB") == 512 * 1024**2 and parse_size("7B") == 7
    for bad, message in (("1G", "unknown unit 'G'"), ("GiB", "expected a whole number"), (True, "got true"),
                         (1.5, "got 1.5"), ("-1GiB", "expected"), (float("nan"), "expected")):
        with pytest.raises(ValueError, match=message):
            parse_size(bad)


def test_both_policy_formats_write_the_adaptive_cadence():
    camel = parse_policies_text(json.dumps([{"name": "p", "tablePattern": "demo.*", "orphanCleanup": {
        "adaptive": {"targetBytes": "1GiB", "min": "p1d", "max": "P90D"}}}]))
    kebab = parse_policies_text(textwrap.dedent("""\
        policies:
          - name: p
            pattern: "demo.*"
            orphan-cleanup: {adaptive: {target-bytes: 1073741824, min: P1D, max: P90D}}
        """))
    config = camel.get("p").configs[Operation.ORPHAN_CLEANUP]
    assert config.adaptive == CADENCE == kebab.get("p").configs[Operation.ORPHAN_CLEANUP].adaptive
    assert config.to_json() == {"adaptive": {"targetBytes": GIB, "min": "P1D", "max": "P90D"}}
    assert to_loader_policy({"orphanCleanup": config.to_json()}) == {
        "orphan-cleanup": {"adaptive": {"target-bytes": GIB, "min": "P1D", "max": "P90D"}}}
    defaults = parse_policies_text('[{"name": "p", "tablePattern": "demo.*", "orphanCleanup": {"adaptive": '
                                   '{"targetBytes": "2GB"}}}]').get("p").configs[Operation.ORPHAN_CLEANUP]
    assert defaults.adaptive == AdaptiveCadence(2_000_000_000, "P1D", "P90D")


@pytest.mark.parametrize("adaptive, errors", [
    ({"targetBytes": "1G"}, ["orphanCleanup.adaptive.targetBytes: '1G': unknown unit 'G'"]),
    ({"min": "P1D"}, ["orphanCleanup.adaptive.targetBytes: is required"]),
    ({"targetBytes": 0}, ["orphanCleanup.adaptive.targetBytes: must be more than 0 bytes, got 0"]),
    ({"targetBytes": "1GiB", "min": "P9D", "max": "P2D"},
     ["orphanCleanup.adaptive.min: P9D is longer than max P2D: min must be at most max"]),
    ({"targetBytes": "1GiB", "min": "PT5M"}, ["orphanCleanup.adaptive.min: must be at least PT1H"]),
    ({"targetBytes": "1GiB", "max": "P3M"}, ["orphanCleanup.adaptive.max: 'P3M' is not an ISO-8601 duration"]),
    ({"targetBytes": "1GiB", "max": "PT0S"}, ["orphanCleanup.adaptive.max: must be longer than zero"]),
    ({"targetBytes": "1GiB", "maxx": "P1D"}, ["orphanCleanup.adaptive.maxx: unknown field; did you mean 'max'?"]),
    ("1GiB", ["orphanCleanup.adaptive: expected a mapping {targetBytes, min, max}, got '1GiB'"]),
])
def test_a_bad_adaptive_cadence_names_the_file_policy_and_field(adaptive, errors):
    text = json.dumps([{"name": "hr", "tablePattern": "demo.*", "orphanCleanup": {"adaptive": adaptive}}])
    with pytest.raises(PolicyError) as raised:
        parse_policies_text(text, source="policies/hr.json")
    for error in errors:
        assert any(line.startswith(f"policies/hr.json: policy 'hr': {error}") for line in raised.value.errors), (
            raised.value.errors)


def test_a_kebab_case_file_is_told_in_its_own_spelling():
    with pytest.raises(PolicyError) as raised:
        parse_policies_text("policies:\n  - {name: p, pattern: 'demo.*', orphan-cleanup: {adaptive: "
                            "{target-bytes: lots, min: P9D, max: P3D}}}", source="k.yaml")
    assert any("orphan-cleanup.adaptive.target-bytes: expected a whole number of bytes" in e
               for e in raised.value.errors), raised.value.errors
    assert any("orphan-cleanup.adaptive.min: P9D is longer than max P3D" in e for e in raised.value.errors)
