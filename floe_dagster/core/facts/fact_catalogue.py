"""The catalogue of table facts: every fact floe-dagster measures of a table, each declared once
(core/facts/table_facts.py says what a declaration holds), and the facts an operation kind declares from its own
module (:func:`declare`).

Stored facts are listed in the metrics record's order (the cache's and the health record's ``metrics``);
each view's places keep the order the views had before the catalogue (Floe's answer, Floe's check order,
the record's derived numbers, Dagit's observation). Everything that shows facts reads :func:`views`: the
metrics record's fields (core/facts/measurements.py), health (core/facts/health_assessment.py), Dagit's observation
(defs/health_events.py), Floe's answer and the text (reports/health_report.py); the iceberg layer's reducers
(iceberg/fact_reducers/) measure the stored ones.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass, field
from math import inf
from typing import Any, Callable, Iterator, Mapping

from floe_dagster.core.facts.table_facts import (
    COLUMNS,
    FULL,
    NESTED,
    REFS,
    SUMMARY,
    Api,
    Check,
    Fact,
    Text,
    bytes_text,
    number_text,
)
from floe_dagster.core.facts.table_properties import DELETE_AFTER_COMMIT

# TOO_MANY_METADATA_FILES' fixed limits (beyond Floe's thresholds): ten times what Iceberg keeps by default.
METADATA_FILES_WARNING, METADATA_FILES_CRITICAL = 1_000, 10_000


# -- the health text's lines (the record's metrics ``m`` and derived numbers ``d``) -------------------------


def _data_files_line(m: Mapping[str, object], d: Mapping[str, object]) -> str:
    small = "" if d.get("small_file_count") is None else (
        f" ({d['small_file_count']} small = {number_text(d['small_file_percent'])}%, {d['large_file_count']} large)")
    return (f"{d['data_file_count']}{small}, {bytes_text(d['total_data_bytes'])}, {m.get('record_count', 0)} records, "
            f"avg {bytes_text(d.get('avg_file_bytes'))}")


def _delete_files_line(m: Mapping[str, object], d: Mapping[str, object]) -> str:
    return (f"{d['delete_file_count']} (ratio {number_text(d['delete_file_ratio'], 4)}; position "
            f"{number_text(m.get('position_delete_file_count'))}, equality "
            f"{number_text(m.get('equality_delete_file_count'))})")


def _snapshots_line(m: Mapping[str, object], d: Mapping[str, object]) -> str:
    return (f"{d['snapshot_count']} (oldest {number_text(d['oldest_snapshot_age_days'])} d, "
            f"newest {number_text(d['newest_snapshot_age_days'])} d ago)")


def _metadata_files_line(m: Mapping[str, object], d: Mapping[str, object]) -> str:
    return (f"{number_text(m.get('metadata_files_written'))} written, {number_text(m.get('metadata_files_tracked'))} "
            f"tracked (delete-after-commit {'on' if d.get('metadata_delete_after_commit') else 'off'})")


def _percent(count: int | None, files: int) -> float | None:
    return None if count is None else (count * 100.0 / files if files else 0.0)


def _metadata_file_count(m: Any, t: Any) -> int | None:
    return max((n for n in (m.metadata_files_written, m.metadata_files_tracked) if n is not None), default=None)


# -- the built-in facts, in the metrics record's order ----------------------------------------------------

_RAW = "tuple[tuple[str, tuple[int, ...], tuple[tuple[int, int, int, int], ...]], ...] | None"
_SPECS = "tuple[tuple[int, tuple[tuple[int, str | None, str, str], ...]], ...] | None"

BUILTIN: tuple[Fact, ...] = (
    Fact("data_file_count", "int", SUMMARY, "live data files", default=0, derived=1, dagit=1,
         api=Api("dataFileCount", 2), text=Text("data files", _data_files_line),
         check=Check("HIGH_FILE_COUNT", 3, "file_count_warning", "file_count_critical", "data files")),
    Fact("total_data_bytes", "int", SUMMARY, "the live data files' bytes (the summary tier: delete files' too)",
         default=0, derived=2, dagit=2, api=Api("totalDataSizeBytes", 3, formatted="totalDataSizeFormatted")),
    Fact("record_count", "int", SUMMARY, "rows in the live data files", default=0, dagit=3),
    Fact("data_file_sizes", "tuple[int, ...] | None", FULL, "every live data file's size in bytes", shape=NESTED,
         report=False),
    Fact("small_file_count", "int | None", FULL, "data files below the policy's smallFileSizeBytes", derived=3,
         dagit=4, api=Api("smallFileCount", 7), measure=lambda m, t: m.small_file_count(t.small_file_size_bytes)),
    Fact("small_file_percent", "float | None", FULL, "small files, % of the data files", derived=4, dagit=5, digits=4,
         measure=lambda m, t: _percent(m.small_file_count(t.small_file_size_bytes), m.data_file_count),
         check=Check("TOO_MANY_SMALL_FILES", 1, "small_file_percent_warning", "small_file_percent_critical",
                     "small files (% of data files)")),
    Fact("large_file_count", "int | None", FULL, "data files above the policy's largeFileSizeBytes", derived=5,
         dagit=6, api=Api("largeFileCount", 8), measure=lambda m, t: m.large_file_count(t.large_file_size_bytes)),
    Fact("large_file_percent", "float | None", FULL, "large files, % of the data files (an issue only if any)",
         derived=6, dagit=7, digits=4,
         measure=lambda m, t: _percent(m.large_file_count(t.large_file_size_bytes), m.data_file_count),
         check=Check("TOO_MANY_LARGE_FILES", 2, "large_file_percent_warning", "large_file_percent_critical",
                     "large files (% of data files)", unless=lambda d: not d.get("large_file_count"))),
    Fact("min_file_bytes", "int | None", FULL, "the smallest data file", derived=7, report=True,
         api=Api("minFileSizeBytes", 4), measure=lambda m, t: m.min_file_bytes),
    Fact("max_file_bytes", "int | None", FULL, "the largest data file", derived=8, report=True,
         api=Api("maxFileSizeBytes", 5), measure=lambda m, t: m.max_file_bytes),
    Fact("avg_file_bytes", "float | None", SUMMARY, "data bytes per data file", derived=9, dagit=8, report=True,
         api=Api("avgFileSizeBytes", 6, formatted="avgFileSizeFormatted"), measure=lambda m, t: m.avg_file_bytes),
    Fact("delete_file_count", "int", SUMMARY, "delete files, position and equality (the summary counts them together)",
         default=0, derived=13, dagit=9, api=Api("deleteFileCount", 9), text=Text("delete files", _delete_files_line),
         check=Check("TOO_MANY_DELETE_FILES", 6, "delete_file_count_warning", "delete_file_count_critical",
                     "delete files")),
    Fact("delete_file_ratio", "float", SUMMARY, "delete files per data file", derived=14, dagit=12, report=True,
         digits=6, api=Api("deleteFileRatio", 12), measure=lambda m, t: m.delete_file_ratio,
         check=Check("HIGH_DELETE_FILE_RATIO", 7, "delete_file_ratio_warning", "delete_file_ratio_critical",
                     "delete files per data file")),
    Fact("position_delete_file_count", "int | None", FULL, "position delete files", dagit=10,
         api=Api("positionDeleteFileCount", 10)),
    Fact("equality_delete_file_count", "int | None", FULL, "equality delete files", dagit=11,
         api=Api("equalityDeleteFileCount", 11)),
    Fact("snapshot_count", "int", SUMMARY, "snapshots in the metadata", default=0, derived=10, dagit=13,
         api=Api("snapshotCount", 1), text=Text("snapshots", _snapshots_line),
         check=Check("TOO_MANY_SNAPSHOTS", 4, "snapshot_count_warning", "snapshot_count_critical", "snapshots")),
    Fact("oldest_snapshot_ms", "int | None", SUMMARY, "the oldest snapshot's time"),
    Fact("oldest_snapshot_age_days", "float | None", SUMMARY, "days since the oldest snapshot",
         age_of="oldest_snapshot_ms", digits=6, derived=11, dagit=14, api=Api("oldestSnapshotAgeDays", 16, whole=True),
         check=Check("OLD_SNAPSHOTS", 5, "snapshot_age_warning_days", "snapshot_age_critical_days",
                     "oldest snapshot age (days)")),
    Fact("newest_snapshot_ms", "int | None", SUMMARY, "the newest snapshot's time (the last write)"),
    Fact("newest_snapshot_age_days", "float | None", SUMMARY, "days since the newest snapshot",
         age_of="newest_snapshot_ms", digits=6, derived=12, dagit=15, api=Api("newestSnapshotAgeDays", 17, whole=True),
         check=Check("STALE_METADATA", 12, "stale_metadata_warning_days", "stale_metadata_critical_days",
                     "days since the newest snapshot")),
    Fact("newest_foreign_commit_ms", "int | None", SUMMARY,
         "the newest snapshot another writer committed (operation not replace): the quiet period "
         "(core/schedules/quiet.py)"),
    Fact("newest_foreign_commit_operation", "str | None", SUMMARY, "that snapshot's operation"),
    Fact("manifest_count", "int | None", FULL, "manifests of the current snapshot", derived=15, dagit=16,
         api=Api("manifestCount", 13), text=Text("manifests", lambda m, d: (
             f"{number_text(d['manifest_count'])} ({bytes_text(d['manifest_total_bytes'])})")),
         check=Check("TOO_MANY_MANIFESTS", 8, "manifest_count_warning", "manifest_count_critical", "manifests")),
    Fact("manifest_total_bytes", "int | None", FULL, "their bytes", derived=16, dagit=17,
         api=Api("totalManifestSizeBytes", 14, formatted="totalManifestSizeFormatted"),
         check=Check("LARGE_MANIFEST_LIST", 11, "manifest_size_warning_bytes", "manifest_size_critical_bytes",
                     "manifest bytes")),
    Fact("partition_count", "int | None", FULL, "partitions (value and spec) holding a live data file; "
         "unpartitioned with data: 1", derived=17, dagit=18, api=Api("partitionCount", 15),
         text=Text("partitions", lambda m, d: (
             f"{number_text(d['partition_count'])} (skew {number_text(d['partition_skew'])})")),
         check=Check("TOO_MANY_PARTITIONS", 9, "partition_count_warning", "partition_count_critical", "partitions")),
    Fact("max_files_per_partition", "int | None", FULL, "the most data files in one partition"),
    Fact("partition_skew", "float | None", FULL, "max over average data files per partition (1.0: even)",
         derived=18, dagit=19, report=True, digits=6, measure=lambda m, t: m.partition_skew,
         check=Check("PARTITION_SKEW", 10, "partition_skew_warning", "partition_skew_critical",
                     "partition skew (max / average files per partition)")),
    Fact("current_snapshot_id", "int | None", SUMMARY, "the current snapshot"),
    Fact("statistics_snapshot_id", "int | None", SUMMARY,
         "the newest table statistics file of the current lineage (core/facts/statistics.py); None: none"),
    Fact("statistics_snapshots_behind", "int | None", SUMMARY, "commits since that statistics file", derived=19,
         dagit=20),
    Fact("statistics_rows_changed", "int | None", SUMMARY, "rows those commits added or deleted"),
    Fact("statistics_rows_changed_percent", "float | None", SUMMARY, "those rows, % of the table's rows", derived=20,
         dagit=21, report=True, digits=6, measure=lambda m, t: m.statistics_rows_changed_percent),
    Fact("partition_statistics_snapshot_id", "int | None", SUMMARY, "the newest partition statistics file's snapshot"),
    Fact("metadata_files_tracked", "int | None", SUMMARY, "metadata.json files Iceberg tracks (current + log)"),
    Fact("metadata_files_written", "int | None", SUMMARY, "metadata.json files written (the current file's version "
         "number); None: its name has none", text=Text("metadata files", _metadata_files_line)),
    Fact("metadata_file_count", "int | None", SUMMARY, "the larger of the two", derived=21, dagit=22,
         measure=_metadata_file_count,
         check=Check("TOO_MANY_METADATA_FILES", 13, METADATA_FILES_WARNING, METADATA_FILES_CRITICAL,
                     f"metadata.json files ({DELETE_AFTER_COMMIT} is not true)",
                     unless=lambda d: d.get("metadata_delete_after_commit"))),
    Fact("metadata_delete_after_commit", "bool", SUMMARY, f"{DELETE_AFTER_COMMIT} is true", derived=22,
         measure=lambda m, t: m.properties.get(DELETE_AFTER_COMMIT, "").strip().lower() == "true"),
    Fact("properties", "dict[str, str]", SUMMARY, "the table's properties", default_factory=dict),
    Fact("location", "str | None", SUMMARY, "the table's base location"),
    Fact("columns", "tuple[ColumnFacts, ...] | None", SUMMARY, "the current schema's top-level columns", shape=COLUMNS,
         report=False),
    Fact("data_file_groups", _RAW, FULL, "per (spec, partition): data file sizes and the deletes applying to each "
         "(the byte estimates' and partition-scoped rewrites' input)", shape=NESTED, report=False),
    Fact("position_delete_groups", "tuple[tuple[str, tuple[int, ...]], ...] | None", FULL,
         "per partition: position delete file sizes", shape=NESTED, report=False),
    Fact("refs", "tuple[RefFacts, ...] | None", SUMMARY, "branches and tags other than main, with what each alone "
         "keeps (core/facts/ref_pins.py; bytes in the full tier)", shape=REFS, report=False),
    Fact("partition_spec_id", "int | None", SUMMARY, "the default partition spec", report=False),
    Fact("partition_specs", _SPECS, SUMMARY, "every partition spec's fields (source column, transform)", shape=NESTED,
         report=False),
)

# -- facts declared elsewhere (an operation kind's) ----------------------------------------------------------

# Packages whose modules may declare facts (core/operation_kinds/: one module per operation kind), imported
# before the catalogue is first read so that their declarations are in it.
FACT_SOURCES = ("floe_dagster.core.operation_kinds",)
_DECLARED: list[Fact] = []
# The metrics record's own fields (core/facts/measurements.py), which no fact may be named.
RECORD_FIELDS = frozenset({"qualified_name", "metadata_location", "tier", "collected_at_ms", "more_facts"})
_state: dict[str, Any] = {"views": None, "sources_loaded": False, "generation": 0}


def declare(*facts: Fact) -> tuple[Fact, ...]:
    """Add facts beyond the built-in ones, from the module that owns them (an operation kind's); their
    reducers are registered in the iceberg layer under the same names. Returns ``facts``."""
    known = {f.name for f in (*BUILTIN, *_DECLARED)}
    for fact in facts:
        if fact.name in known:
            raise ValueError(f"table fact {fact.name!r} is declared twice: a fact is declared once")
        if fact.name in RECORD_FIELDS:
            raise ValueError(f"table fact {fact.name!r}: the metrics record's own field has this name")
        known.add(fact.name)
    _DECLARED.extend(facts)
    _changed()
    return facts


@contextlib.contextmanager
def declaring(*facts: Fact) -> Iterator[tuple[Fact, ...]]:
    """``facts`` declared for the block only (tests: what a new fact changes)."""
    declare(*facts)
    try:
        yield facts
    finally:
        for fact in facts:
            _DECLARED.remove(fact)
        _changed()


def _changed() -> None:
    _state["views"] = None
    _state["generation"] += 1


def _load_sources() -> None:
    if _state["sources_loaded"]:
        return
    _state["sources_loaded"] = True
    for source in FACT_SOURCES:
        try:
            importlib.import_module(source)
        except ModuleNotFoundError as exc:  # a source package this code base does not have (yet)
            if exc.name != source:
                raise


def _placed(facts: tuple[Fact, ...], place: Callable[[Fact], float | None]) -> tuple[Fact, ...]:
    """The facts a view shows (``place`` not None), by place, then in declaration order."""
    shown = sorted((p, i) for i, f in enumerate(facts) if (p := place(f)) is not None)
    return tuple(facts[i] for _, i in shown)


def _at(part: Check | Api | None) -> float | None:
    """A check's or Floe key's place; None: the view does not show the fact; no place: after the placed ones."""
    return None if part is None else (inf if part.at is None else part.at)


def _check_views(facts: tuple[Fact, ...]) -> None:
    """What the views need of the declarations: a clear error naming the fact when one does not hold."""
    stored = {f.name for f in facts if f.stored}
    for fact in facts:
        where = f"table fact {fact.name!r}"
        if fact.check is not None and fact.derived is None:
            raise ValueError(f"{where}: a checked fact is shown among the derived numbers (give it a `derived` place)")
        if fact.age_of is not None and fact.age_of not in stored:
            raise ValueError(f"{where}: its age is of {fact.age_of!r}, which is no stored fact")
        if (fact.dagit is not None or fact.api is not None) and fact.derived is None and not fact.in_report:
            raise ValueError(f"{where}: a fact Dagit or Floe's answer shows is read from the health record: give it a "
                             "`derived` place, or keep it in the record's metrics (report=True)")


@dataclass(frozen=True, eq=False)
class FactViews:
    """Every fact, and each view's facts in the view's order (made once per catalogue)."""

    facts: tuple[Fact, ...]
    generation: int
    by_name: Mapping[str, Fact] = field(init=False)
    stored: tuple[Fact, ...] = field(init=False)  # the metrics record's fields
    declared_stored: tuple[Fact, ...] = field(init=False)  # ... beyond the built-in ones
    declared_names: frozenset[str] = field(init=False)  # their names
    report_extra: tuple[Fact, ...] = field(init=False)  # computed facts added to the record's metrics
    derived: tuple[Fact, ...] = field(init=False)
    checks: tuple[Fact, ...] = field(init=False)
    dagit: tuple[Fact, ...] = field(init=False)
    api: tuple[Fact, ...] = field(init=False)
    text: tuple[Fact, ...] = field(init=False)
    history_only: tuple[Fact, ...] = field(init=False)  # in Floe's answer, not plotted: kept for the history
    clocked: tuple[Fact, ...] = field(init=False)  # the derived numbers made at the assessment's clock
    memo: dict[Any, Any] = field(init=False)  # what the views' readers work out once per catalogue

    def __post_init__(self) -> None:
        _check_views(self.facts)
        facts, builtin = self.facts, {f.name for f in BUILTIN}
        values = {
            "by_name": {f.name: f for f in facts},
            "stored": tuple(f for f in facts if f.stored),
            "declared_stored": tuple(f for f in facts if f.stored and f.name not in builtin),
            "report_extra": tuple(f for f in facts if not f.stored and f.in_report),
            "derived": _placed(facts, lambda f: f.derived),
            "checks": _placed(facts, lambda f: _at(f.check)),
            "dagit": _placed(facts, lambda f: f.dagit),
            "api": _placed(facts, lambda f: _at(f.api)),
            "text": tuple(f for f in facts if f.text is not None),
            "memo": {},
        }
        values["clocked"] = tuple(f for f in values["derived"] if f.clocked)
        values["declared_names"] = frozenset(f.name for f in values["declared_stored"])
        values["history_only"] = tuple(f for f in values["api"] if f.dagit is None)
        for name, value in values.items():
            object.__setattr__(self, name, value)


def views() -> FactViews:
    """The catalogue (built-in facts, then the declared ones) and its views."""
    found = _state["views"]
    if found is None:
        _load_sources()
        found = _state["views"] = FactViews((*BUILTIN, *_DECLARED), _state["generation"])
    return found


def catalogue() -> tuple[Fact, ...]:
    return views().facts


# -- the docs' table (docs/health.md) ----------------------------------------------------------------------------


def _limit(limit: str | float) -> str:
    if not isinstance(limit, str):
        return f"{limit:g}"
    head, *rest = limit.split("_")
    return "`" + head + "".join(part.capitalize() for part in rest) + "`"


def _fact_row(fact: Fact) -> str:
    kept = "stored" if fact.stored else (f"age of `{fact.age_of}`" if fact.clocked else "computed")
    api = fact.api and f"`{fact.api.key}`" + (f", `{fact.api.formatted}`" if fact.api.formatted else "")
    check = fact.check and f"`{fact.check.issue}` {_limit(fact.check.warning)} / {_limit(fact.check.critical)}"
    cells = [f"`{fact.name}`", fact.type.replace("|", "\\|"), fact.tier, kept,
             "yes" if fact.derived is not None else "", "yes" if fact.dagit is not None else "", api or "", check or "",
             fact.text.label if fact.text else "", fact.doc.replace("|", "\\|")]
    return "| " + " | ".join(cells) + " |"


def facts_markdown() -> str:
    """The catalogue as docs/health.md lists it (``python -m floe_dagster.core.facts.fact_catalogue`` prints it)."""
    header = ("| fact | type | tier | kept | derived | Dagit | Floe's answer | health check: warning / critical | "
              "text line | meaning |")
    return "\n".join([header, "|" + " --- |" * 10, *(_fact_row(fact) for fact in views().facts)])


if __name__ == "__main__":
    print(facts_markdown())
