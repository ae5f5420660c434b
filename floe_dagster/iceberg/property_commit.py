"""A policy's declared table properties set in one metadata commit (PyIceberg), from the table as read.

Through PyIceberg rather than Spark SQL's ``ALTER TABLE ... SET TBLPROPERTIES``: Iceberg's Java
``UpdateProperties`` retries a failed commit on a refreshed table, so a writer that changes a
declared property between floe's read and floe's commit would be overwritten without a word. Here
the commit starts from the metadata floe read under the table lock; a catalog that commits by
swapping the metadata location (SQL, Hive, Glue, DynamoDB) refuses it when anything was committed
since (``CommitFailedException``), and PyIceberg does not retry a commit that adds no snapshot. That
lost race is a conflict, retried by a later tick that reads the table again.
"""

from __future__ import annotations

from typing import Mapping

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from floe_dagster.core.operations import Operation
from floe_dagster.core.tables import TableName
from floe_dagster.errors import CommitConflict


def commit_table_properties(read: Table, table: TableName, changes: Mapping[str, str]) -> Table:
    """Set ``changes`` on the table as ``read``; returns the table as committed. CommitConflict when
    another writer committed after the read."""
    try:
        return read.transaction().set_properties(dict(changes)).commit_transaction()
    except CommitFailedException as exc:
        raise CommitConflict(
            f"{Operation.APPLY_TABLE_PROPERTIES.value} on '{table.qualified}' lost a commit race: another writer "
            f"committed after floe read the table's properties, so nothing was set; a later run reads them again "
            f"({exc})") from exc


__all__ = ["commit_table_properties"]
