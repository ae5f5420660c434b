"""Shared helpers for the benchmarks: the machine's description, timing, and table printing."""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Sequence

ROOT = Path(__file__).resolve().parent.parent
# Another checkout's package in place of this one's (the benchmarks' --vs: the code before a change,
# measured by the same benchmark script in the same run): FLOE_BENCH_TREE names its root.
TREE_VARIABLE = "FLOE_BENCH_TREE"
TREE = Path(os.environ.get(TREE_VARIABLE) or ROOT)
if str(TREE) not in sys.path:
    sys.path.insert(0, str(TREE))

JARS_CACHE = os.environ.get("FLOE_JARS_CACHE") or str(Path.home() / ".cache" / "floe-dagster" / "jars")


def java_home() -> str | None:
    import glob

    for candidate in [os.environ.get("JAVA_HOME"), *sorted(glob.glob("/usr/lib/jvm/java-17-openjdk-*"))]:
        if candidate and os.path.exists(os.path.join(candidate, "bin", "java")):
            return candidate
    return None


def ensure_java() -> None:
    home = java_home()
    if home:
        os.environ["JAVA_HOME"] = home


def machine() -> str:
    """nproc, memory, CPU model, Python, date, load average: the line every benchmark prints first."""
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gib = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    try:
        load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        load = "?"
    return (f"machine: nproc={os.cpu_count()}, memory={mem_gib}, cpu={cpu}, python={platform.python_version()}, "
            f"date={date.today().isoformat()}, load average 1/5/15 min at start={load} (the machine is shared: "
            f"compare ratios from one run, not absolute times across runs)")


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def repeat(fn: Callable[[], object], times: int) -> list[float]:
    """Wall-clock seconds of ``times`` calls."""
    found = []
    for _ in range(times):
        started = time.perf_counter()
        fn()
        found.append(time.perf_counter() - started)
    return found


def describe(seconds: Sequence[float]) -> str:
    if len(seconds) == 1:
        return f"{seconds[0]:.3f} s"
    return f"median {statistics.median(seconds):.3f} s (min {min(seconds):.3f}, max {max(seconds):.3f}, n={len(seconds)})"


@contextmanager
def timed(label: str, into: dict[str, float] | None = None) -> Iterator[None]:
    started = time.perf_counter()
    yield
    elapsed = time.perf_counter() - started
    if into is not None:
        into[label] = elapsed
    print(f"  {label}: {elapsed:.3f} s", flush=True)


def table(rows: Sequence[Sequence[object]], header: Sequence[str]) -> str:
    """A Markdown table, so the output pastes into README.md."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in cells[1:]]
    return "\n".join(lines)


# The clock of the planner benchmarks (1, 11, 14): their inputs are built for it.
PLANNER_NOW = datetime(2026, 11, 23, 10, 7, tzinfo=timezone.utc)


def python_in_venv() -> str:
    return sys.executable


def run_timed(cmd: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> tuple[float, str]:
    """Wall-clock seconds of one subprocess (which must succeed) and its output."""
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return elapsed, done.stdout


def versus(argv: list[str], other: str, rounds: int) -> list[tuple[str, dict]]:
    """Run this benchmark (``argv``: its script and flags, printing one JSON line last) ``rounds`` times on
    this checkout and on ``other`` in turn, whole fresh processes, this one first: [(``new`` or ``old``,
    its JSON)] in the order run, so each pair shares the machine's load of its minute."""
    found = []
    for _ in range(rounds):
        for label, tree in (("new", ROOT), ("old", Path(other).resolve())):
            env = {**os.environ, TREE_VARIABLE: str(tree), "PYTHONWARNINGS": "ignore"}
            load = os.getloadavg()[0]
            _, out = run_timed([sys.executable, *argv], env=env)
            found.append((label, {**json.loads(out.strip().splitlines()[-1]), "load": load}))
            print(f"  {label} ({tree}, load {load:.2f}): {out.strip().splitlines()[-1]}", flush=True)
    return found


def ratio_rows(runs: list[tuple[str, dict]], keys: Sequence[str]) -> list[tuple[str, str, str, str, str]]:
    """For each figure of ``keys`` (a path through the JSON, ``a/b/c``): old and new medians over the rounds,
    and new ÷ old pair by pair (min, median, max)."""
    def get(found: dict, key: str) -> float:
        for part in key.split("/"):
            found = found[part]
        return float(found)  # type: ignore[arg-type]

    rows = []
    olds, news = [r for label, r in runs if label == "old"], [r for label, r in runs if label == "new"]
    for key in keys:
        old, new = [get(r, key) for r in olds], [get(r, key) for r in news]
        pairs = [n / o for n, o in zip(new, old) if o]
        rows.append((key, f"{statistics.median(old):.3f}", f"{statistics.median(new):.3f}",
                     f"{statistics.median(pairs):.2f}" if pairs else "-",
                     f"{min(pairs):.2f}–{max(pairs):.2f}" if pairs else "-"))
    return rows


CODE_LOCATION_POLICIES = """
- name: default
  tablePattern: "demo.*.*"
  rewriteDataFiles: {strategy: BINPACK}
  rewriteDataFilesSchedule: {interval: PT1H}
  expireSnapshots: {retainLast: 5}
  expireSnapshotsSchedule: {cronExpression: "15 * * * *", timezone: UTC}
  orphanCleanup: {retentionPeriodInDays: 3}
  orphanCleanupSchedule: {cronExpression: "0 */4 * * *", timezone: Europe/Berlin}
  rewriteManifests: {}
  rewriteManifestsSchedule: {cronExpression: "0 0/30 * * * ?"}
  rewritePositionDeleteFiles: {}
  rewritePositionDeleteFilesSchedule: {interval: PT1H}
- name: gold
  tablePattern: "demo.ns00.*"
  priority: 10
  rewriteDataFiles: {strategy: BINPACK}
  rewriteDataFilesSchedule: {cronExpression: "30 2 * * *", timezone: Europe/Berlin}
  expireSnapshots: {}
  expireSnapshotsSchedule: {cronExpression: "0 3 * * *", timezone: America/New_York}
  orphanCleanup: {}
  orphanCleanupSchedule: {interval: P1D}
"""


def make_code_location(root: Path, n_tables: int, namespaces: int = 20) -> Path:
    """A floe.yaml (embedded catalog under ``root``), a policy folder, and a table cache of
    ``n_tables`` synthetic tables in ``namespaces`` namespaces (``demo.nsNN.tNNNNN``): what the code
    location's import reads, without listing any catalog. Returns the floe.yaml path."""
    import json
    import textwrap

    root.mkdir(parents=True, exist_ok=True)
    (root / "policies").mkdir(exist_ok=True)
    (root / "policies" / "policies.yaml").write_text(textwrap.dedent(CODE_LOCATION_POLICIES))
    config = root / "floe.yaml"
    config.write_text(f"data-dir: {root / 'data'}\npolicies: [{root / 'policies'}]\n"
                      f"spark:\n  jars-cache: {JARS_CACHE}\n")
    cache = root / "data" / "cache" / "tables-demo.json"
    cache.parent.mkdir(parents=True, exist_ok=True)
    tables = [[[f"ns{i % namespaces:02d}"], f"t{i:05d}"] for i in range(n_tables)]
    cache.write_text(json.dumps({"catalog": "demo", "tables": tables}))
    return config


def embedded_settings(root: Path, policies: str):
    """Settings for an embedded lakehouse (SQLite catalog ``demo``, warehouse) under ``root``."""
    import textwrap

    from floe_dagster.settings import load_settings

    root.mkdir(parents=True, exist_ok=True)
    (root / "policies").mkdir(exist_ok=True)
    (root / "policies" / "policies.yaml").write_text(textwrap.dedent(policies))
    config = root / "floe.yaml"
    config.write_text(f"data-dir: {root / 'data'}\npolicies: [{root / 'policies'}]\n"
                      f"spark:\n  jars-cache: {JARS_CACHE}\n")
    return config, load_settings(config, environ={})


def use_dagster_home(root: Path) -> Path:
    import shutil

    home = root / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def fragmented_table(catalog, identifier: str, files: int, rows_per_file: int, start_id: int = 0):
    """A table of ``files`` small parquet files (the demo's schema), added with one ``add_files``."""
    import uuid

    import pyarrow.parquet as pq

    from floe_dagster.demo import EVENT_SCHEMA, local_path, rows

    namespace = identifier.rsplit(".", 1)[0]
    if (namespace,) not in {tuple(n) for n in catalog.list_namespaces()}:
        catalog.create_namespace(namespace)
    table = catalog.create_table(identifier, schema=EVENT_SCHEMA)
    folder = local_path(table.location()) / "data"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(files):
        path = folder / f"small-{i:05d}-{uuid.uuid4().hex[:8]}.parquet"
        pq.write_table(rows(start_id + i * rows_per_file, rows_per_file), path)
        paths.append(f"file://{path}")
    table.add_files(paths)
    return catalog.load_table(identifier)
