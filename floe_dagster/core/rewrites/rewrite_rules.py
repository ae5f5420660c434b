"""The rules that decide which files a rewrite takes (:class:`RewriteRules`): Iceberg's planner options with
Iceberg's defaults and checks, from a policy's config and the table's target file size property. The byte
estimates (core/rewrites/estimates.py) and a partition-scoped rewrite's choice (core/rewrites/partition_scope.py)
apply them. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from floe_dagster.core.operation_config import OperationConfig

# A rewriting kind's config is read as its base (its fields that share a rule's name): the kinds import
# the estimates for their byte estimates, so neither module names a kind.

MIB = 1024 * 1024
DEFAULT_TARGET_FILE_SIZE_BYTES = 512 * MIB  # Iceberg's write.target-file-size-bytes default
DEFAULT_DELETE_TARGET_FILE_SIZE_BYTES = 64 * MIB  # Iceberg's write.delete.target-file-size-bytes default
MIN_FILE_SIZE_DEFAULT_RATIO = 0.75
MAX_FILE_SIZE_DEFAULT_RATIO = 1.80
MIN_INPUT_FILES_DEFAULT = 5
MAX_FILE_GROUP_SIZE_BYTES_DEFAULT = 100 * 1024**3
DELETE_FILE_THRESHOLD_DEFAULT = 2**31 - 1  # Integer.MAX_VALUE: the rule is off
DELETE_RATIO_THRESHOLD_DEFAULT = 0.3

TARGET_FILE_SIZE_PROPERTY = "write.target-file-size-bytes"
DELETE_TARGET_FILE_SIZE_PROPERTY = "write.delete.target-file-size-bytes"


class EstimateOptionError(ValueError):
    """Rules Iceberg itself would refuse (so the procedure would fail too): a table's target file size
    property that is no whole number or too small, or a policy's ``targetFileSizeBytes`` of 1 (the
    maximum, 180 % of it, rounds down to the target)."""


@dataclass(frozen=True)
class RewriteRules:
    """The planner options that decide which files a rewrite takes (Iceberg's names in comments)."""

    target_file_size_bytes: int  # target-file-size-bytes
    min_file_size_bytes: int  # min-file-size-bytes
    max_file_size_bytes: int  # max-file-size-bytes
    min_input_files: int = MIN_INPUT_FILES_DEFAULT  # min-input-files
    rewrite_all: bool = False  # rewrite-all
    max_file_group_size_bytes: int = MAX_FILE_GROUP_SIZE_BYTES_DEFAULT  # max-file-group-size-bytes
    delete_file_threshold: int = DELETE_FILE_THRESHOLD_DEFAULT  # delete-file-threshold (data files only)
    delete_ratio_threshold: float = DELETE_RATIO_THRESHOLD_DEFAULT  # delete-ratio-threshold (data files only)
    max_files_to_rewrite: int | None = None  # max-files-to-rewrite (data files only)

    def __post_init__(self) -> None:
        """Iceberg's checks (``SizeBasedFileRewritePlanner.init`` and the data file planner's)."""
        target, minimum, maximum = self.target_file_size_bytes, self.min_file_size_bytes, self.max_file_size_bytes
        if target <= 0:
            raise EstimateOptionError(f"'target-file-size-bytes' is set to {target} but must be > 0")
        if minimum < 0:
            raise EstimateOptionError(f"'min-file-size-bytes' is set to {minimum} but must be >= 0")
        if not target > minimum:
            raise EstimateOptionError(
                f"'target-file-size-bytes' ({target}) must be > 'min-file-size-bytes' ({minimum})")
        if not target < maximum:
            raise EstimateOptionError(
                f"'target-file-size-bytes' ({target}) must be < 'max-file-size-bytes' ({maximum})")
        for name, value, lowest in (("min-input-files", self.min_input_files, 1),
                                    ("max-file-group-size-bytes", self.max_file_group_size_bytes, 1),
                                    ("delete-file-threshold", self.delete_file_threshold, 0),
                                    ("max-files-to-rewrite", self.max_files_to_rewrite, 1)):
            if value is not None and value < lowest:
                raise EstimateOptionError(f"'{name}' is set to {value} but must be {'> 0' if lowest else '>= 0'}")
        if not 0 < self.delete_ratio_threshold <= 1:
            raise EstimateOptionError(
                f"'delete-ratio-threshold' is set to {self.delete_ratio_threshold} but must be > 0 and <= 1")

    @classmethod
    def sized(cls, target_file_size_bytes: int, **rules: Any) -> "RewriteRules":
        """Rules around a target size: Iceberg's defaults for the rest (the minimum file size 75 % of
        the target, the maximum 180 %), unless given."""
        return cls(**{
            "target_file_size_bytes": target_file_size_bytes,
            "min_file_size_bytes": int(target_file_size_bytes * MIN_FILE_SIZE_DEFAULT_RATIO),
            "max_file_size_bytes": int(target_file_size_bytes * MAX_FILE_SIZE_DEFAULT_RATIO),
            **rules,
        })

    @classmethod
    def for_data_files(
        cls, config: OperationConfig | None = None, table_properties: Mapping[str, str] | None = None
    ) -> "RewriteRules":
        """Rules for ``rewrite_data_files`` from the policy's config and the table's properties."""
        return cls._from_config(config, table_properties, TARGET_FILE_SIZE_PROPERTY, DEFAULT_TARGET_FILE_SIZE_BYTES)

    @classmethod
    def for_position_deletes(
        cls, config: OperationConfig | None = None, table_properties: Mapping[str, str] | None = None
    ) -> "RewriteRules":
        """Rules for ``rewrite_position_delete_files`` (target: ``write.delete.target-file-size-bytes``)."""
        return cls._from_config(
            config, table_properties, DELETE_TARGET_FILE_SIZE_PROPERTY, DEFAULT_DELETE_TARGET_FILE_SIZE_BYTES)

    @classmethod
    def _from_config(cls, config: OperationConfig | None,
                     table_properties: Mapping[str, str] | None, target_property: str,
                     default_target: int) -> "RewriteRules":
        """The config's fields set that name a rule (a config field and a rule share Iceberg's option
        name, in snake case); the target is the config's, else the table's property, else Iceberg's.
        The property is read either way, as Iceberg does (a bad one fails the procedure too)."""
        given = {f.name: getattr(config, f.name, None) for f in fields(cls)}
        given = {name: value for name, value in given.items() if value is not None}
        table_target = _table_target(table_properties or {}, target_property, default_target)
        return cls.sized(given.pop("target_file_size_bytes", table_target), **given)


def _table_target(properties: Mapping[str, str], name: str, default: int) -> int:
    value = properties.get(name)
    if value is None:
        return default
    try:
        return int(str(value).strip())
    except ValueError:
        raise EstimateOptionError(f"'{name}' must be a whole number, got {value!r}") from None
