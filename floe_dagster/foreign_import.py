"""``floe-dagster import --from polaris|s3tables|amoro FILE``: a foreign system's maintenance settings as
policy files. What each source's settings become is core/'s (core/foreign/foreign_policies.py and one module per
source); this module reads the file (or, for Amoro, the catalog's tables' properties with PyIceberg) and
writes the files the way ``import-floe`` does: validated in a staging folder beside ``--to`` with the
policy files it keeps, then moved in (:func:`floe_dagster.migration.write_policies`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

from floe_dagster.core.foreign.foreign_policies import SOURCES, SourceError, resolve
from floe_dagster.core.foreign.import_amoro import amoro_levels
from floe_dagster.core.foreign.import_polaris import polaris_levels
from floe_dagster.core.foreign.import_s3tables import s3tables_levels
from floe_dagster.migration import ImportReport, MigrationError, write_policies

READERS: dict[str, Callable[[Any, str], list]] = {"polaris": polaris_levels, "s3tables": s3tables_levels,
                                                  "amoro": amoro_levels}
MAX_FILE_BYTES = 64 * 2**20


def read_source_file(path: Path) -> Any:
    """The file's JSON; SourceError naming the file (and the line and column of malformed JSON)."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise SourceError([f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB: not a maintenance configuration"])
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceError([f"{path}: cannot be read ({exc.strerror or exc})"]) from None
    except UnicodeDecodeError:
        raise SourceError([f"{path}: not UTF-8 text"]) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError([f"{path}: line {exc.lineno} column {exc.colno}: not valid JSON: {exc.msg}"]) from None


def amoro_document_from_catalog(settings: Any) -> dict[str, object]:
    """Every table's properties, read from the catalog with PyIceberg (floe's own catalog opening), in the
    shape of an Amoro file: ``{"tables": {"<namespace>.<table>": {...}}}``."""
    from floe_dagster.iceberg.catalog import list_tables, load_table, open_catalog

    catalog = open_catalog(settings.catalog)
    tables = {}
    for table in list_tables(catalog):
        tables[".".join((*table.namespace, table.name))] = dict(load_table(catalog, table).properties)
    return {"tables": tables}


def import_foreign(source: str, document: object, label: str, catalog: str, to: Path,
                   overwrite: bool = False) -> tuple[ImportReport, int]:
    """The source's settings written as policy files in ``to``; (the report, the number of policies)."""
    if source not in SOURCES:
        raise MigrationError(f"--from {source!r}: expected one of {', '.join(SOURCES)}")
    policies, unwritten = resolve(source, catalog, READERS[source](document, label))
    report = write_policies(policies, to, overwrite, command=f"import-{source}")
    report.lost += unwritten
    return report, len(policies)


def cmd_import(args, settings_of: Callable) -> int:
    """The CLI's ``import``: exit 0 when every policy was written, 1 otherwise (each problem printed)."""
    path = Path(args.file)
    settings = None
    try:
        if args.source == "amoro" and not path.exists():
            settings = settings_of(args)
            if args.file != settings.catalog.name:
                raise SourceError([f"{args.file}: neither a file nor the catalog floe.yaml names "
                                   f"({settings.catalog.name!r})"])
            document, label = amoro_document_from_catalog(settings), f"catalog {args.file}"
        else:
            document, label = read_source_file(path), str(path)
        catalog = args.catalog or (settings or settings_of(args)).catalog.name
        report, count = import_foreign(args.source, document, label, catalog, Path(args.to), args.overwrite)
    except SourceError as exc:
        for line in exc.errors:
            print(f"floe-dagster import: {line}", file=sys.stderr)
        print("floe-dagster import: nothing was written", file=sys.stderr)
        return 1
    except MigrationError as exc:
        print(f"floe-dagster import: {exc}", file=sys.stderr)
        return 1
    report.print_lines(f"read {label}: {count} polic{'y' if count == 1 else 'ies'}", args.to)
    return 1 if report.invalid else 0


def add_import_command(sub: Any, func: Callable) -> None:
    command = sub.add_parser("import", help="write the maintenance settings of Polaris, S3 Tables or Amoro as "
                                            "policy files (never more aggressive than the source)")
    command.add_argument("--from", dest="source", required=True, choices=SOURCES)
    command.add_argument("file", help="the source's JSON file (docs/migration.md); for amoro also the catalog's "
                                      "name, to read its tables' properties")
    command.add_argument("--to", required=True, help="the folder to write the policy files to")
    command.add_argument("--catalog", help="the catalog the policies' patterns name (default: floe.yaml's)")
    command.add_argument("--overwrite", action="store_true", help="replace files that already exist")
    command.set_defaults(func=func)


__all__ = ["import_foreign", "read_source_file", "amoro_document_from_catalog", "cmd_import", "add_import_command"]
