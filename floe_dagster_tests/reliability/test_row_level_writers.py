"""Maintenance while a CDC job runs merge-on-read DELETE, UPDATE and MERGE on the same tables.

A Spark writer in its own process (its own SparkSession, on the PostgreSQL catalog: no SQLite lock)
runs deterministic statements in a loop on a format-2 table (position deletes) and a format-3 table
(deletion vectors), and keeps a Python model of the rows each committed statement leaves. Meanwhile
the real maintenance (``floe-dagster trigger``'s in-process path: rewrite_data_files,
rewrite_position_delete_files, rewrite_manifests, expire_snapshots) runs back to back, first with
partial progress off (the old behaviour), then with floe's default for merge-on-read tables (partial
progress on). Afterwards:

* every row is exactly what the model says, read with Spark and with PyIceberg;
* every run succeeded or ended as ``conflict`` naming the winning commit; no failure counts toward
  backoff (the coordination database's consecutive_failures is 0);
* the share of lost races before and after is printed (docs/operations.md records the figures).

The race is seeded (the writer's statements depend only on their turn) and short in the suite: each
phase races for ``FLOE_RACE_PHASE_SECONDS`` (default 8 s) and maintains at least one table, the phases
taking the tables in turn (the format-2 table first), so every table is maintained at least once: on
2 shared cores one run of the four operations outlasts a short phase, and a run of each table in each
phase doubled the test's minutes. The figures in docs/operations.md come from the long version, run by
hand (many runs of each table a phase)::

    FLOE_RACE_PHASE_SECONDS=45 ./dev test floe_dagster_tests/reliability/test_row_level_writers.py -s
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from floe_dagster.coordination.database import Coordination
from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.iceberg.catalog import load_table, open_catalog
from floe_dagster.iceberg.table_cache import refresh_table_cache
from floe_dagster.settings import load_settings
from floe_dagster.launching.manual import CONFLICT, SUCCEEDED, trigger_table
from floe_dagster.spark.engine import IcebergSparkEngine
from floe_dagster.spark.procedures import spark_table_reference
from floe_dagster_tests.integration.test_production import pg_lake  # noqa: F401 (fixture)

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

# Seconds of racing per phase (partial progress off, then floe's default): short in the suite, 45 for the
# figures in docs/operations.md.
PHASE_S = float(os.environ.get("FLOE_RACE_PHASE_SECONDS", "8"))
OPERATIONS = ["REWRITE_DATA_FILES", "REWRITE_POSITION_DELETE_FILES", "REWRITE_MANIFESTS", "EXPIRE_SNAPSHOTS"]
TABLES = {"cdc_v2": 2, "cdc_v3": 3}
POLICY = """
- name: cdc
  tablePattern: "*"
  rewriteDataFiles: {{{partial}}}
  rewritePositionDeleteFiles: {{{partial}}}
  rewriteManifests: {{}}
  expireSnapshots: {{retainLast: 10, maxSnapshotAge: PT0S}}
"""

WRITER = r'''
import json, sys, time
from pathlib import Path
from floe_dagster.settings import load_settings
from floe_dagster.spark.engine import IcebergSparkEngine

config, out_path, stop_path = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
tables = json.loads(sys.argv[4])
settings = load_settings(config)
spark = IcebergSparkEngine.from_settings(settings).spark
cat = settings.catalog.name
out = out_path.open("a", buffering=1)
models = {}
for name, version in tables.items():
    ref = f"`{cat}`.`sales`.`{name}`"
    spark.sql(f"CREATE TABLE {ref} (id BIGINT, part INT, v BIGINT) USING iceberg PARTITIONED BY (part) "
              f"TBLPROPERTIES ('format-version'='{version}', 'write.delete.mode'='merge-on-read', "
              "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')")
    # 5 files in each of 4 partitions (a file group per partition) in one commit: 5 round-robin tasks, each
    # writing every partition (no clustering by partition for this write alone).
    rows = [(i, i % 4, i) for i in range(400)]
    (spark.createDataFrame(rows, "id BIGINT, part INT, v BIGINT").repartition(5).writeTo(ref)
     .option("distribution-mode", "none").append())
    assert spark.sql(f"SELECT count(*) FROM {ref}.files").collect()[0][0] == 20, "not 5 files a partition"
    models[name] = {i: (p, v) for i, p, v in rows}
print(json.dumps({"ready": True}), file=out)
i = 0
counts = {"committed": 0, "lost": 0}
while not stop_path.exists():
    name = list(tables)[i % len(tables)]
    ref, model, p, k = f"`{cat}`.`sales`.`{name}`", models[name], (i // 2) % 4, i % 7
    kind = ("DELETE", "UPDATE", "MERGE")[(i // 2) % 3]
    if kind == "DELETE":
        sql = f"DELETE FROM {ref} WHERE part = {p} AND id % 7 = {k} AND id % 3 = 0"
        apply = lambda m: [m.pop(j) for j in [j for j, (q, _) in m.items() if q == p and j % 7 == k and j % 3 == 0]]
    elif kind == "UPDATE":
        sql = f"UPDATE {ref} SET v = v + 1000 WHERE part = {p} AND id % 7 = {k}"
        apply = lambda m: [m.__setitem__(j, (q, v + 1000)) for j, (q, v) in list(m.items()) if q == p and j % 7 == k]
    else:  # an upsert of one existing id (if still there) and one new id, both in partition p
        source = [(p + 4 * (i % 100), p, -i), (100_000 + i * 4 + p, p, i)]
        values = ", ".join(f"({a}, {b}, {c})" for a, b, c in source)
        sql = (f"MERGE INTO {ref} t USING (SELECT * FROM VALUES {values} AS s(id, part, v)) s ON t.id = s.id "
               "WHEN MATCHED THEN UPDATE SET t.v = s.v WHEN NOT MATCHED THEN INSERT *")
        apply = lambda m: [m.__setitem__(a, (b, c)) for a, b, c in source]
    try:
        spark.sql(sql)
    except Exception as exc:
        text = str(exc)
        if "CommitStateUnknown" in text:
            raise  # the model could not tell
        counts["lost"] += 1
        print(json.dumps({"lost": kind, "table": name, "error": text.splitlines()[0][:300]}), file=out)
    else:
        apply(model)
        counts["committed"] += 1
    i += 1
print(json.dumps({"done": counts, "models": {n: {str(j): list(r) for j, r in m.items()} for n, m in models.items()}}),
      file=out)
spark.stop()
'''


def write_policy(config: Path, partial: str) -> None:
    (config.parent / "policies" / "p.yaml").write_text(textwrap.dedent(POLICY.format(partial=partial)))


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def maintain_while_racing(config: Path, out: Path, results: Path) -> None:
    """The maintenance side, in a process of its own: a pytest process whose Spark JVM another test
    started has only that test's JDBC drivers on its class path ("No suitable driver" for PostgreSQL),
    so the runs and the final Spark read happen here. Writes each run's outcome and the rows Spark reads
    to ``results`` (JSON)."""
    settings = load_settings(config)
    engine = IcebergSparkEngine.from_settings(settings)
    try:
        engine.spark  # noqa: B018 (this process's Spark starts while the writer's does: the runs reuse it)
        deadline = time.monotonic() + 300
        while not any(line.get("ready") for line in read_lines(out)):
            assert time.monotonic() < deadline, "the writer never got ready"
            time.sleep(1)
        refresh_table_cache(settings)
        tables = [TableName.parse(f"sales.{name}", settings.catalog.name) for name in TABLES]
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        turn = 0  # the tables in turn across both phases
        for phase, partial in (("before", "partialProgressEnabled: false"), ("after", "")):
            write_policy(config, partial)  # runs read the policies each time
            ends, first = time.monotonic() + PHASE_S, turn
            while time.monotonic() < ends or turn == first:  # at least one run a phase
                table = tables[turn % len(tables)]
                turn += 1
                summary = trigger_table(settings, table.qualified, OPERATIONS, reason="race test", actor="test",
                                        trigger_id=f"race-{phase}-{turn}")
                runs[phase] += [{"table": table.qualified, "operation": o.operation.value, "status": o.status,
                                 "message": o.message, "metadata": {k: v for k, v in o.metadata.items()  # the plain values
                                                                    if isinstance(v, (str, int, float, bool))}}
                                for o in summary.outcomes]
        (out.parent / "stop").touch()  # the writer's signal: maintenance is done
        deadline = time.monotonic() + 300
        while not any("done" in line for line in read_lines(out)):  # its last statement has landed
            assert time.monotonic() < deadline, "the writer never finished"
            time.sleep(1)
        rows = {}
        for table in tables:
            with engine.unit_of_work() as spark:
                rows[table.name] = [[r["id"], r["part"], r["v"]] for r in
                                    spark.sql(f"SELECT id, part, v FROM {spark_table_reference(table)}").collect()]
        results.write_text(json.dumps({"runs": runs, "rows": rows}))
    finally:
        engine.stop()


def test_maintenance_racing_merge_on_read_writers_keeps_every_row_and_loses_races_as_conflicts(pg_lake, tmp_path):
    settings, config = pg_lake
    write_policy(config, "partialProgressEnabled: false")
    out, stop, results = tmp_path / "writer.jsonl", tmp_path / "stop", tmp_path / "results.json"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(config), str(out), str(stop), json.dumps(TABLES)],
                              stdout=subprocess.DEVNULL, stderr=(tmp_path / "writer.err").open("w"))
    try:  # 780 s: under pytest-timeout's 900 s for the whole test, so that a stuck run fails here, saying so
        maintenance = subprocess.run(
            [sys.executable, "-m", "floe_dagster_tests.reliability.test_row_level_writers", str(config), str(out),
             str(results)], capture_output=True, text=True, timeout=780, cwd=Path(__file__).resolve().parents[2])
        error = maintenance.stderr
        assert maintenance.returncode == 0, error[error.rfind("Traceback"):][-4000:] or error[-4000:]
    finally:
        stop.touch()
        writer.wait(timeout=300)
    assert writer.returncode == 0, (tmp_path / "writer.err").read_text()[-3000:]
    done = next(line for line in read_lines(out) if "done" in line)
    found = json.loads(results.read_text())
    tables = [TableName.parse(f"sales.{name}", settings.catalog.name) for name in TABLES]

    # Every run succeeded or lost its race as a conflict naming the commit that won.
    report = {}
    for phase, outcomes in found["runs"].items():
        bad = [(o["table"], o["operation"], o["status"], o["message"]) for o in outcomes
               if o["status"] not in (SUCCEEDED, CONFLICT)]
        assert not bad, bad
        for o in outcomes:
            if o["status"] == CONFLICT:
                assert "lost a commit race" in o["message"] and "the commit that won: snapshot" in o["message"], o
        rewrites = [o for o in outcomes if o["operation"] == Operation.REWRITE_DATA_FILES.value]
        lost_all = sum(o["status"] == CONFLICT for o in rewrites)
        partial = [o for o in rewrites if o["metadata"].get("outcome") == "partial"]
        landed = [o for o in rewrites if o["status"] == SUCCEEDED]
        report[phase] = {
            "runs": Counter(f"{o['operation']}:{o['status']}" for o in outcomes),
            "rewrite_runs": len(rewrites), "rewrite_conflicts": lost_all, "rewrite_partial": len(partial),
            "lost_share": round(lost_all / len(rewrites), 2) if rewrites else None,
            "groups_planned_in_landed_runs": sum(int(o["metadata"].get("file_groups_planned", 0)) for o in landed),
            "groups_left_in_landed_runs": sum(int(o["metadata"].get("file_groups_left", 0)) for o in landed),
        }
    print("\nrow-level writers vs maintenance:", json.dumps({**report, "writer": done["done"]}, indent=1, default=dict))

    # No failure counted toward backoff; every operation ran at least once in each phase.
    history = Coordination(settings.coordination_url).all_history()
    for table in tables:
        for op in OPERATIONS:
            state = history[(table.qualified, Operation(op))]
            assert state.consecutive_failures == 0 and state.failures == 0, (table.qualified, op, state)

    # Rows: exactly the model, with Spark and with PyIceberg.
    for table in tables:
        model = {int(j): (p, v) for j, (p, v) in done["models"][table.name].items()}
        seen = [(i, (p, v)) for i, p, v in found["rows"][table.name]]
        assert len(seen) == len(dict(seen)), f"{table.qualified}: duplicated rows (Spark)"
        wrong = set(dict(seen).items()) ^ set(model.items())
        assert not wrong, f"{table.qualified}: {len(wrong)} rows wrong (Spark): {sorted(wrong)[:10]}"
        arrow = load_table(open_catalog(settings.catalog), table).scan().to_arrow()
        seen = list(zip(arrow["id"].to_pylist(), zip(arrow["part"].to_pylist(), arrow["v"].to_pylist())))
        assert len(seen) == len(dict(seen)), f"{table.qualified}: duplicated rows (PyIceberg)"
        wrong = set(dict(seen).items()) ^ set(model.items())
        assert not wrong, f"{table.qualified}: {len(wrong)} rows wrong (PyIceberg): {sorted(wrong)[:10]}"


if __name__ == "__main__":
    maintain_while_racing(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
