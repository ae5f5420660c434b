"""A policy's declared table properties set in one metadata commit (PyIceberg), only if no other writer
changed a declared property since floe read them.

Not through Spark SQL's ``ALTER TABLE ... SET TBLPROPERTIES``: Iceberg's Java ``UpdateProperties``
retries a failed commit on the refreshed table, so a writer that changed a declared property between
floe's read and floe's commit would be overwritten without a word. PyIceberg applies an update to the
table's newest metadata too, so the commit carries a requirement of floe's own,
:class:`AssertDeclaredProperties`: the declared keys still have the values floe read (unset ones still
unset). Catalogs whose commits PyIceberg makes itself (SQL, Hive, Glue, DynamoDB) check requirements
against the newest metadata just before they swap the metadata location atomically, so a concurrent
change to a declared property refuses the commit: a conflict, retried by a later run that reads again.

A REST catalog checks a commit's requirements on the server, which knows only the Iceberg REST spec's
kinds, so there floe reads the table once more right before the commit and compares; the window left
is that read's round trip. Either way, a change right after floe's commit shows in the check after it
(spark/operation_steps/apply_table_properties.py), also as a conflict.
"""

from __future__ import annotations

from typing import Literal, Mapping

from pydantic import Field
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import CommitTableResponse, Table, TableMetadata
from pyiceberg.table.update import AssertTableUUID, SetPropertiesUpdate, ValidatableTableRequirement

from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import CommitConflict


class AssertDeclaredProperties(ValidatableTableRequirement):
    """The declared properties still have the values floe read (None: still unset)."""

    type: Literal["floe-assert-declared-properties"] = Field(default="floe-assert-declared-properties")
    expected: dict[str, str | None]

    def validate(self, base_metadata: TableMetadata | None) -> None:
        if base_metadata is None:
            raise CommitFailedException("Requirement failed: current table metadata is missing")
        changed = changed_since(self.expected, base_metadata.properties)
        if changed:
            raise CommitFailedException(f"Requirement failed: {changed} changed since floe read the properties")


def changed_since(expected: Mapping[str, str | None], properties: Mapping[str, str]) -> str:
    """The declared keys whose values are no longer the ones read, as ``key: read -> now``; empty if none."""
    return ", ".join(f"{key}: {_shown(value)} -> {_shown(properties.get(key))}"
                     for key, value in expected.items() if properties.get(key) != value)


def commit_table_properties(read: Table, table: TableName, changes: Mapping[str, str],
                            declared: Mapping[str, str | None]) -> CommitTableResponse:
    """Set ``changes`` on the table as ``read``, asserting ``declared`` (every declared key, with the value
    read); returns the metadata committed and its location. CommitConflict when another writer changed a
    declared property meanwhile."""
    assertion = AssertDeclaredProperties(expected=dict(declared))
    requirements: tuple = (AssertTableUUID(uuid=read.metadata.table_uuid),)
    try:
        if isinstance(read.catalog, RestCatalog):
            assertion.validate(read.catalog.load_table(read.name()).metadata)  # the server cannot check it
        else:
            requirements += (assertion,)
        return read.catalog.commit_table(read, requirements, (SetPropertiesUpdate(updates=dict(changes)),))
    except CommitFailedException as exc:
        raise CommitConflict(
            f"{Operation.APPLY_TABLE_PROPERTIES.value} on '{table.qualified}' lost a commit race: another writer "
            f"changed a declared property after floe read it, so nothing was set; a later run reads them again "
            f"({exc})") from exc


def _shown(value: str | None) -> str:
    return "unset" if value is None else repr(value)


__all__ = ["AssertDeclaredProperties", "changed_since", "commit_table_properties"]
