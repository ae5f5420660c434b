"""What one table's maintenance run cost and what it bought, declared once: the compute Spark measured
for the table's own work (:class:`Compute`), the table's shape before and after from its metadata
(:class:`TableShape`), the benefit worked out from the two (:class:`Benefit`), and their names in each
place they go: the materialization's metadata keys (``floe/compute/*``, ``floe/benefit/*``), the
coordination database's outcome columns (:data:`OUTCOME_COLUMNS`, which it declares from this list) and
the JSON of a run's figures that the history read (:class:`RunFigures`) gives back.

Pure: the engine measures (spark/compute_metrics.py), the iceberg layer reads the shapes
(iceberg/table_shape.py), the run records them (defs/table_run.py, defs/table_outcomes.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime
from typing import Any, Mapping

COMPUTE_PREFIX = "floe/compute/"
BENEFIT_PREFIX = "floe/benefit/"

# Where a run's compute figures come from.
SPARK = "spark"  # Spark's status store, the table's own jobs (by job tag)
SPARK_CONNECT = "spark-connect"  # a Connect server reports no executor CPU, task time or bytes for a CALL
NO_SPARK = "none"  # the kind committed without Spark (one PyIceberg metadata commit)

CONNECT_UNAVAILABLE = ("Spark Connect (3.5) reports no executor CPU, task time or bytes for a CALL: its server "
                       "sends only the plan's SQL metrics, and the status store is in the server's JVM")


@dataclass(frozen=True)
class Compute:
    """The Spark work of one table's operation: its jobs' executor CPU and task time (slot seconds), the
    bytes its tasks read and wrote, and floe's own wall clock around it. A figure Spark could not give is
    None, and ``unavailable`` says why."""

    source: str
    wall_s: float
    executor_cpu_s: float | None = None
    task_s: float | None = None
    bytes_read: int | None = None
    bytes_written: int | None = None
    jobs: int | None = None
    stages: int | None = None
    tasks: int | None = None
    unavailable: str | None = None

    def to_metadata(self) -> dict[str, object]:
        return {COMPUTE_PREFIX + name: value for name, value in asdict(self).items()
                if value is not None or name != "unavailable"}

    @classmethod
    def from_json(cls, data: Mapping[str, object] | None) -> "Compute | None":
        return _known(cls, data) if data else None


@dataclass(frozen=True)
class TableShape:
    """A table's current snapshot as its metadata describes it (the snapshot summary's totals, the
    manifest list, the metadata file's size), never its data files. ``live_bytes`` covers data and
    delete files alike (the summary has no data-only total)."""

    data_files: int
    delete_files: int
    live_bytes: int
    manifests: int
    snapshots: int
    metadata_file_bytes: int | None = None

    @property
    def scan_files(self) -> int:
        """The files a full scan of the current snapshot opens: every data file and every delete file."""
        return self.data_files + self.delete_files

    @property
    def scan_bytes(self) -> int:
        """The bytes a full scan reads at most: every live file."""
        return self.live_bytes

    @property
    def mean_file_bytes(self) -> int | None:
        """The live files' mean size (None: no file)."""
        return self.live_bytes // self.scan_files if self.scan_files else None

    def numbers(self) -> dict[str, int | None]:
        """What the metadata shows of it, derived numbers included."""
        return {**asdict(self), "mean_file_bytes": self.mean_file_bytes, "scan_files": self.scan_files,
                "scan_bytes": self.scan_bytes}


@dataclass(frozen=True)
class Benefit:
    """What one run bought, from the table's shape before and after it (metadata only, no scan), and the
    files it deleted from storage as its procedure counts them (snapshot expiry, orphan cleanup)."""

    before: TableShape
    after: TableShape
    files_deleted: int = 0
    # An orphan cleanup's: the bytes of the orphans it found (deleted, quarantined or listed by a dry run, and
    # the backlog a cap left), what the adaptive cadence learns from (core/schedules/orphan_cadence.py). Exact when the
    # quarantine moved them, else ``estimated``: the files × the table's mean file size after the run
    # (Iceberg's procedure names the files, not their sizes). None: not an orphan cleanup.
    orphan_bytes: int | None = None
    orphan_bytes_estimated: bool = False
    # An orphan cleanup's: the bytes of the orphans it removed from the table (deleted, or moved into the
    # quarantine, which deletes them after its grace period): the sizes its own listing read, exact; after
    # the plain ``CALL`` (no listing of floe's) ``estimated``, its deleted files × the mean file size.
    orphan_bytes_reclaimed: int | None = None
    orphan_bytes_reclaimed_estimated: bool = False

    @property
    def files_removed(self) -> int:
        """Live files fewer: data and delete files a full scan no longer opens."""
        return max(0, self.before.scan_files - self.after.scan_files)

    @property
    def bytes_reclaimed(self) -> int:
        """Live bytes fewer (a rewrite that dropped delete files or compressed better; 0 when it grew). The
        storage an expiry or an orphan cleanup frees is not in the metadata: their ``files_deleted`` counts it."""
        return max(0, self.before.live_bytes - self.after.live_bytes)

    @property
    def snapshots_expired(self) -> int:
        """Snapshots fewer in the metadata (an expiry's; 0 when the run added some)."""
        return max(0, self.before.snapshots - self.after.snapshots)

    def deltas(self) -> dict[str, int]:
        before, after = self.before, self.after
        return {
            "files_removed": self.files_removed,
            "bytes_reclaimed": self.bytes_reclaimed,
            "files_deleted": self.files_deleted,
            "data_files_removed": before.data_files - after.data_files,
            "delete_files_removed": before.delete_files - after.delete_files,
            "manifests_removed": before.manifests - after.manifests,
            "snapshots_expired": self.snapshots_expired,
            "scan_files_saved": before.scan_files - after.scan_files,
            "scan_bytes_saved": before.scan_bytes - after.scan_bytes,
        }

    def to_metadata(self) -> dict[str, object]:
        metadata: dict[str, object] = {}
        for when, shape in (("before", self.before), ("after", self.after)):
            metadata.update({f"{BENEFIT_PREFIX}{name}_{when}": value for name, value in shape.numbers().items()})
        metadata.update({BENEFIT_PREFIX + name: value for name, value in self.deltas().items()})
        if self.orphan_bytes_reclaimed is not None:
            metadata[BENEFIT_PREFIX + "orphan_bytes_reclaimed"] = self.orphan_bytes_reclaimed
            metadata[BENEFIT_PREFIX + "orphan_bytes_reclaimed_estimated"] = self.orphan_bytes_reclaimed_estimated
        return metadata

    def to_json(self) -> dict[str, object]:
        orphans = ({"orphan_bytes": self.orphan_bytes, "orphan_bytes_estimated": self.orphan_bytes_estimated}
                   if self.orphan_bytes is not None else {})
        if self.orphan_bytes_reclaimed is not None:
            orphans.update(orphan_bytes_reclaimed=self.orphan_bytes_reclaimed,
                           orphan_bytes_reclaimed_estimated=self.orphan_bytes_reclaimed_estimated)
        return {"before": asdict(self.before), "after": asdict(self.after), "files_deleted": self.files_deleted,
                **orphans, **self.deltas()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> "Benefit | None":
        if not data or "before" not in data or "after" not in data:
            return None
        orphan_bytes, reclaimed = data.get("orphan_bytes"), data.get("orphan_bytes_reclaimed")
        return cls(_known(TableShape, data["before"]), _known(TableShape, data["after"]),
                   int(data.get("files_deleted") or 0), int(orphan_bytes) if orphan_bytes is not None else None,
                   bool(data.get("orphan_bytes_estimated")), int(reclaimed) if reclaimed is not None else None,
                   bool(data.get("orphan_bytes_reclaimed_estimated")))


def _known(cls: Any, data: Mapping[str, Any]) -> Any:
    """``cls`` from a JSON object, keys it does not know left out (a row written by a newer version)."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class RunFigures:
    """One past run of a (table, operation) as the history read gives it: its compute and its benefit."""

    run_id: str
    finished_at: datetime
    compute: Compute | None
    benefit: Benefit | None

    @property
    def compute_s(self) -> float | None:
        """The run's compute seconds: executor CPU when Spark measured it, else None."""
        return self.compute.executor_cpu_s if self.compute else None


def figures_json(compute: Compute | None, benefit: Benefit | None) -> dict[str, object] | None:
    """The JSON an outcome row keeps of a run's figures (None: the run has none)."""
    if compute is None and benefit is None:
        return None
    return {"compute": asdict(compute) if compute else None, "benefit": benefit.to_json() if benefit else None}


def figures_from_json(data: Mapping[str, Any] | None) -> tuple[Compute | None, Benefit | None]:
    if not data:
        return None, None
    return Compute.from_json(data.get("compute")), Benefit.from_json(data.get("benefit"))


# The figures an outcome row also keeps as numeric columns (sums over runs: /metrics, reports), each
# (column, where it is read from, whether it is an integer). The coordination database declares a
# column for each, and adds it to a database made before it.
OUTCOME_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("executor_cpu_s", "compute", False),
    ("task_s", "compute", False),
    ("wall_s", "compute", False),
    ("bytes_read", "compute", True),
    ("bytes_written", "compute", True),
    ("files_removed", "benefit", True),
    ("bytes_reclaimed", "benefit", True),
    ("files_deleted", "benefit", True),
    ("snapshots_expired", "benefit", True),
    ("orphan_bytes_reclaimed", "benefit", True),
)


def outcome_columns(compute: Compute | None, benefit: Benefit | None) -> dict[str, float | int | None]:
    """The numeric columns of one outcome row (None where the run has no such figure)."""
    values: dict[str, float | int | None] = {}
    for column, source, _ in OUTCOME_COLUMNS:
        if source == "compute":
            values[column] = getattr(compute, column) if compute else None
        else:
            values[column] = getattr(benefit, column) if benefit else None
    return values


def metadata_value(metadata: Mapping[str, object], key: str) -> Any:
    """A metadata entry's plain value (Dagster's MetadataValue or a plain one)."""
    value = metadata.get(key)
    return getattr(value, "value", value)


def figures_from_metadata(metadata: Mapping[str, object]) -> tuple[Compute | None, Benefit | None]:
    """A materialization's figures back from its ``floe/compute/*`` and ``floe/benefit/*`` keys."""
    compute_data = {f.name: metadata_value(metadata, COMPUTE_PREFIX + f.name) for f in fields(Compute)}
    compute = Compute(**compute_data) if compute_data["source"] is not None else None
    shapes = {when: {f.name: metadata_value(metadata, f"{BENEFIT_PREFIX}{f.name}_{when}") for f in fields(TableShape)}
              for when in ("before", "after")}
    benefit = None
    if shapes["before"]["data_files"] is not None and shapes["after"]["data_files"] is not None:
        benefit = Benefit(TableShape(**shapes["before"]), TableShape(**shapes["after"]),
                          int(metadata_value(metadata, BENEFIT_PREFIX + "files_deleted") or 0))
        benefit = with_orphans(benefit, metadata)
    return compute, benefit


def _count(metadata: Mapping[str, object], key: str) -> int | None:
    value = metadata_value(metadata, key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def with_orphans(benefit: Benefit, metadata: Mapping[str, object]) -> Benefit:
    """An orphan cleanup's benefit with the bytes of the orphans it found and of those it removed (see
    :class:`Benefit`), from its metadata: ``orphan_files_count`` and ``orphan_backlog_files``,
    ``quarantined_bytes`` when it moved them, ``orphan_bytes_reclaimed`` when its listing read their sizes."""
    removed = _count(metadata, "orphan_files_count")
    if removed is None:
        return benefit
    mean = benefit.after.mean_file_bytes or 0
    reclaimed = _count(metadata, "orphan_bytes_reclaimed")
    benefit = (replace(benefit, orphan_bytes_reclaimed=reclaimed) if reclaimed is not None else
               replace(benefit, orphan_bytes_reclaimed=removed * mean, orphan_bytes_reclaimed_estimated=True))
    files = removed + (_count(metadata, "orphan_backlog_files") or 0)
    quarantined = _count(metadata, "quarantined_bytes")
    if quarantined is not None and quarantined > 0:
        return replace(benefit, orphan_bytes=quarantined)
    return replace(benefit, orphan_bytes=files * mean, orphan_bytes_estimated=True)


__all__ = ["Compute", "TableShape", "Benefit", "RunFigures", "SPARK", "SPARK_CONNECT", "NO_SPARK",
           "CONNECT_UNAVAILABLE", "COMPUTE_PREFIX", "BENEFIT_PREFIX", "OUTCOME_COLUMNS", "outcome_columns",
           "figures_json", "figures_from_json", "figures_from_metadata", "metadata_value", "with_orphans"]
