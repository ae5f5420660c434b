"""What the code location sends to Dagit, hashed part by part: the check that a change to the code location's load
time changed nothing Dagit, the daemon or a run reads (issue 35, item 8).

The code location's ``RepositorySnap`` (what the code server serializes for Dagit and the daemon: every asset node
with its key, group, kinds, description, owners, tags, metadata, partitions, dependencies and checks; the asset
check nodes; each job's snapshot with its ops, outputs and their types; the partition sets, schedules, sensors and
resources), serialized as Dagster serializes it, with the temporary folder's path replaced by ``<tmp>`` (the
folder is the same on every run: one run at a time). Two code
locations: benchmark 6's (``--tables`` synthetic tables in 20 namespaces under its two policies), and one whose
policies name owners and teams, declare SLA contracts and govern tables with writers (``floe.yaml``'s ``writers``:
each table asset then depends on its writer's asset), with a disabled policy. The script prints one hash per part
of each; run it on two trees (``FLOE_BENCH_TREE``, as benchmark 6's ``--vs``) and compare the lines. ``--dump DIR``
writes each part's JSON too, to diff what differs.

    FLOE_BENCH_TREE=/tmp/base python benchmarks/definitions_fingerprint.py > base.txt
    python benchmarks/definitions_fingerprint.py > new.txt && diff base.txt new.txt
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, TREE, TREE_VARIABLE, make_code_location  # noqa: E402

RICH_POLICIES = """
- name: sales
  tablePattern: "demo.ns00.*"
  priority: 10
  tags: {owner: "alice@example.com, team:data-eng", team: sales, tier: gold}
  description: Compaction for the sales tables.
  rewriteDataFiles: {strategy: BINPACK}
  rewriteDataFilesSchedule: {interval: PT1H, sla: {maxAge: P1D, severity: WARN, owner: team-sales}}
  expireSnapshots: {retainLast: 5}
  expireSnapshotsSchedule: {cronExpression: "15 * * * *", timezone: UTC, sla: {maxAge: P2D}}
- name: shadowed
  tablePattern: "demo.ns01.*"
  mode: shadow
  tags: {owner: "not an owner"}
  rewriteManifests: {}
  rewriteManifestsSchedule: {cronExpression: "0 0/30 * * * ?", sla: {maxAge: PT12H}}
- name: off
  tablePattern: "demo.ns02.*"
  enabled: false
  orphanCleanup: {}
  orphanCleanupSchedule: {cronExpression: "0 3 * * *"}
- name: rest
  tablePattern: "demo.*.*"
  expireSnapshots: {}
  expireSnapshotsSchedule: {interval: PT6H}
  orphanCleanup: {retentionPeriodInDays: 3}
  orphanCleanupSchedule: {cronExpression: "0 */4 * * *", timezone: Europe/Berlin}
"""
RICH_WRITERS = """
writers:
  - {tables: "demo.ns00.*", asset: "warehouse/{namespace}/{table}"}
  - {tables: "demo.ns03.t0000*", asset: "ingest/{table}"}
"""


def rich_code_location(root: Path, n_tables: int) -> Path:
    """Benchmark 6's layout under the policies and writers rules above."""
    config = make_code_location(root, n_tables)
    (root / "policies" / "policies.yaml").write_text(textwrap.dedent(RICH_POLICIES))
    config.write_text(config.read_text() + textwrap.dedent(RICH_WRITERS))
    return config


def snapshot_parts() -> dict[str, object]:
    """In this (fresh) process, FLOE_CONFIG set by the parent: the serialized RepositorySnap's parts by name
    (each job's and each schedule's apart, the lists sorted as Dagster sorts them)."""
    import floe_dagster.definitions as location
    from dagster._core.remote_representation.external_data import RepositorySnap
    from dagster_shared.serdes import serialize_value

    snap = json.loads(serialize_value(RepositorySnap.from_def(location.defs.get_repository_def())))
    parts: dict[str, object] = {}
    for name, value in sorted(snap.items()):
        if name in ("job_datas", "external_pipeline_datas"):
            parts.update({f"job {job['name']}": job for job in value or []})
        else:
            parts[name] = value
    return parts


def fingerprint(tree: Path, layout: str, n_tables: int, dump: Path | None) -> list[str]:
    """``layout``'s parts built by the package of ``tree`` in a fresh process, one line each: its name and hash."""
    # The same folder on each tree: Dagster's config type keys are hashes of the config's defaults, which name it.
    root = Path(tempfile.gettempdir()) / "floe-defs-fingerprint"
    shutil.rmtree(root, ignore_errors=True)
    try:
        location = root / "location"
        config = (rich_code_location if layout == "rich" else make_code_location)(location, n_tables)
        home = location / "dagster_home"
        home.mkdir()
        shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
        env = {**os.environ, "FLOE_CONFIG": str(config), "DAGSTER_HOME": str(home), "PYTHONWARNINGS": "ignore",
               TREE_VARIABLE: str(tree), "PYTHONPATH": str(tree)}
        done = subprocess.run([sys.executable, __file__, "--here"], env=env, cwd=str(location),
                              capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"the code location did not load:\n{done.stderr[-4000:]}")
        text = done.stdout.strip().splitlines()[-1].replace(str(location.resolve()), "<tmp>")
        parts = json.loads(text.replace(str(location), "<tmp>"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    lines = []
    for name, value in parts.items():
        rendered = json.dumps(value, sort_keys=True, ensure_ascii=False)
        lines.append(f"{layout} {n_tables} tables, {name}: {hashlib.sha256(rendered.encode()).hexdigest()[:16]} "
                     f"({len(rendered):,} characters)")
        if dump is not None:
            dump.mkdir(parents=True, exist_ok=True)
            (dump / f"{layout}-{name.replace(' ', '_')}.json").write_text(
                json.dumps(value, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=300)
    parser.add_argument("--dump", type=Path, help="a folder for each part's JSON")
    parser.add_argument("--here", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.here:
        print(json.dumps(snapshot_parts()))
        return
    for layout in ("benchmark", "rich"):
        for line in fingerprint(TREE, layout, args.tables, args.dump):
            print(line, flush=True)


if __name__ == "__main__":
    main()
