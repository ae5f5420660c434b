"""What ``floe-dagster import-floe`` makes of a Floe server's answer (pure: core/foreign/floe_migration.py): Floe's
summaries carry over what they hold and name the rest; files in the PolicyLoader format load back to the
same policy; file names are safe and say why they differ from the policy's name."""

from __future__ import annotations

import json

import pytest

from floe_dagster.core.foreign.floe_migration import (
    ImportedPolicy,
    file_names,
    imported_policy,
    policy_file_text,
    policy_meaning,
)
from floe_dagster.core.operations import Operation
from floe_dagster.core.policies.policy import PolicyError, parse_policies_text
from floe_dagster.core.policies.policy_formats import to_loader_policy

# Floe's PolicyResponse (PolicyResponse.java): operations summarised, record fields, thresholds in full.
FLOE_RESPONSE = {
    "id": "5b0c7f3e-0000-4000-8000-000000000001", "name": "web-nightly", "description": None,
    "tablePattern": "lake.web.*", "enabled": True, "priority": 4, "tags": {"team": "web"},
    "createdAt": "2026-01-02T03:04:05Z", "updatedAt": "2026-01-02T03:04:05Z",
    "rewriteDataFiles": {"enabled": True, "schedule": "PT6H"},
    "expireSnapshots": {"enabled": True, "schedule": "0 0 3 * * ?"},
    "orphanCleanup": {"enabled": True, "schedule": None},
    "rewriteManifests": None,
    "healthThresholds": {"snapshotCountWarning": 40, "snapshotCountCritical": 400},
    "triggerConditions": {"smallFileCountAbove": 12, "snapshotCountAbove": None, "perOperationMinIntervalMinutes": {},
                          "criticalPipeline": False, "triggerLogic": "OR"},
    "lastAudit": "2026-01-02",
}


def test_floes_summaries_carry_over_what_they_hold_and_name_the_rest():
    imported = imported_policy(FLOE_RESPONSE)
    assert imported.document == {
        "name": "web-nightly", "tablePattern": "lake.web.*", "enabled": True, "priority": 4, "tags": {"team": "web"},
        "rewriteDataFiles": {}, "rewriteDataFilesSchedule": {"interval": "PT6H"},
        "healthThresholds": {"snapshotCountWarning": 40, "snapshotCountCritical": 400},
        "triggerConditions": {"smallFileCountAbove": 12, "criticalPipeline": False, "triggerLogic": "OR"},
    }
    # The operations that delete are not enabled with the default options: written disabled, with their schedule.
    assert imported.disabled == {"expireSnapshots": {}, "expireSnapshotsSchedule": {"cronExpression": "0 0 3 * * ?"},
                                 "orphanCleanup": {}}
    assert imported.lost == (
        "rewriteDataFiles: Floe's API returns no operation options: written as {} (Iceberg's defaults); copy its "
        "options from the policy's definition in Floe",
        "rewriteDataFilesSchedule: Floe's API returns only its interval: its windowStart, windowEnd, allowedDays, "
        "timeout, priority and enabled are not carried over",
        "expireSnapshots: written disabled (commented out in the file): Floe's API returns no options for it, and "
        "with the default options it could delete snapshots that the policy's options in Floe keep; copy its options "
        "from the policy's definition in Floe, then uncomment it",
        "expireSnapshotsSchedule: Floe's API returns only its cronExpression: its windowStart, windowEnd, "
        "allowedDays, timeout, priority and enabled are not carried over",
        "orphanCleanup: written disabled (commented out in the file): Floe's API returns no options for it, and "
        "with the default options it could delete files that the policy's options in Floe keep; copy its options "
        "from the policy's definition in Floe, then uncomment it",
        "orphanCleanupSchedule: Floe's API returns no interval or cron for it: add one when you enable it",
        "lastAudit: no equivalent in floe-dagster's policies: not carried over",
    )
    written = policy_file_text(imported)
    assert written.suffix == ".yaml" and written.text.startswith("policies:\n- name: web-nightly\n  pattern: lake.web.*\n")
    assert "interval-hours: 6" in written.text
    policy = parse_policies_text(written.text).get("web-nightly")
    assert policy.configured_operations() == [Operation.REWRITE_DATA_FILES]  # nothing that deletes runs, even by hand
    assert written.text.endswith(
        "  # expire-snapshots and orphan-cleanup: written disabled by floe-dagster import-floe. Floe's API\n"
        "  # returns no options for operations that delete, and with the default options they could delete\n"
        "  # snapshots or files that the policy's options in Floe keep. Copy the options from the policy's\n"
        "  # definition in Floe, then uncomment:\n"
        "  # expire-snapshots: {}\n"
        "  # expire-snapshots-schedule:\n"
        "  #   cron-expression: 0 0 3 * * ?\n"
        "  # orphan-cleanup: {}\n")
    # Uncommented (after filling in the options), the block is the policy's: indented as its keys are.
    uncommented = written.text.replace("  # expire-snapshots: {}", "  expire-snapshots: {retain-last: 5}").replace(
        "  # expire-snapshots-schedule:\n  #   cron", "  expire-snapshots-schedule:\n    cron")
    enabled = parse_policies_text(uncommented).get("web-nightly")
    assert enabled.config(Operation.EXPIRE_SNAPSHOTS).retain_last == 5
    assert enabled.schedule(Operation.EXPIRE_SNAPSHOTS).cron_5field == "0 3 * * *"  # Quartz, as Floe wrote it


def test_a_policy_kept_in_the_api_format_gets_its_disabled_operations_as_yaml_comments():
    response = {**FLOE_RESPONSE, "rewriteDataFiles": {"enabled": True, "schedule": "PT1M30S"}}  # seconds: no loader spelling
    written = policy_file_text(imported_policy(response))
    assert written.suffix == ".yaml" and written.note.startswith(
        "kept in Floe's API format (as YAML, for the comment on what is disabled): rewriteDataFilesSchedule.interval")
    assert written.text.startswith("name: web-nightly\ntablePattern: lake.web.*\n")
    assert "\n# expireSnapshots and orphanCleanup: written disabled by floe-dagster import-floe." in written.text
    assert "\n# expireSnapshotsSchedule:\n#   cronExpression: 0 0 3 * * ?\n# orphanCleanup: {}\n" in written.text
    assert parse_policies_text(written.text).get("web-nightly").configured_operations() == [Operation.REWRITE_DATA_FILES]
    # A disabled operation's own schedule the PolicyLoader format cannot spell: the API format for the file
    seconds = {**FLOE_RESPONSE, "expireSnapshots": {"enabled": True, "schedule": "PT1M30S"}}
    written = policy_file_text(imported_policy(seconds))
    assert written.suffix == ".yaml" and "expireSnapshotsSchedule.interval: 'PT1M30S'" in written.note
    assert "\n# expireSnapshotsSchedule:\n#   interval: PT1M30S\n" in written.text
    # floe-dagster's full definitions carry every option: nothing is disabled
    full = imported_policy({"name": "f", "tablePattern": "*", "floe": {"expireSnapshots": {"retainLast": 3}}})
    assert full.disabled == {} and full.document["expireSnapshots"] == {"retainLast": 3}


@pytest.mark.parametrize("document, note", [
    ({"name": "a", "tablePattern": "*", "expireSnapshots": {"maxSnapshotAge": "PT36H"}},
     "expireSnapshots.maxSnapshotAge: 'PT36H' is not a whole number of days"),
    ({"name": "a", "tablePattern": "*", "rewriteDataFiles": {}, "rewriteDataFilesSchedule": {"interval": "PT90S"}},
     "rewriteDataFilesSchedule.interval: 'PT90S' is not a whole number of minutes"),
])
def test_what_the_loader_format_cannot_spell_stays_json(document, note):
    written = policy_file_text(ImportedPolicy("a", document))
    assert written.suffix == ".json" and note in written.note
    assert policy_meaning(parse_policies_text(written.text)) == policy_meaning(parse_policies_text(json.dumps(document)))


def test_the_loader_spelling_round_trips_every_kind_of_key():
    document = {"name": "r", "tablePattern": "lake.*.*",
                "orphanCleanup": {"retentionPeriodInDays": 2, "equalSchemes": {"s3a": "s3"}},
                "orphanCleanupSchedule": {"interval": "P1DT2H30M", "timeout": 1.5},
                "rewriteManifests": {"rewriteIf": {"partitionSummaries": [{"containsNull": True}]}},
                "triggerConditions": {"perOperationMinIntervalMinutes": {"ORPHAN_CLEANUP": 60}}}
    loader = to_loader_policy(document)
    assert loader["pattern"] == "lake.*.*" and loader["orphan-cleanup"] == {"retention-period-days": 2,
                                                                           "equal-schemes": {"s3a": "s3"}}
    assert loader["orphan-cleanup-schedule"] == {"interval-days": 1, "interval-hours": 2, "interval-minutes": 30,
                                                 "timeout-hours": 1.5}
    assert loader["rewrite-manifests"] == {"rewrite-if": {"partition-summaries": [{"contains-null": True}]}}
    assert loader["trigger-conditions"] == {"per-operation-min-interval-minutes": {"ORPHAN_CLEANUP": 60}}
    assert policy_file_text(ImportedPolicy("r", document)).suffix == ".yaml"


def test_an_invalid_policy_is_refused_with_every_problem():
    with pytest.raises(PolicyError, match=r"rewriteDataFiles.strategy: must be one of"):
        policy_file_text(ImportedPolicy("x", {"name": "x", "tablePattern": "*", "rewriteDataFiles": {"strategy": "Z"}}))


def test_file_names_are_safe_and_say_why():
    names = ["a/b", "team \"a's\"", ".hidden", "A/B", "ok", "back\\slash", "x" * 300, "  "]
    assert file_names(names, [".yaml"] * len(names)) == [
        ("a_b.yaml", "characters unsafe in a file name ('/') became _"),
        ("team _a_s_.yaml", "characters unsafe in a file name ('\"' \"'\") became _"),
        ("_.hidden.yaml", "a leading '.' (a hidden file) got a '_' before it"),
        ("A_B-2.yaml", "characters unsafe in a file name ('/') became _; 'A_B.yaml' was taken by another policy"),
        ("ok.yaml", ""),
        ("back_slash.yaml", "characters unsafe in a file name ('\\\\') became _"),
        ("x" * 200 + ".yaml", "cut to 200 bytes"),
        ("policy.yaml", "spaces around it were dropped"),
    ]
    assert file_names(["same", "same"], [".yaml", ".json"]) == [("same.yaml", ""), ("same.json", "")]
