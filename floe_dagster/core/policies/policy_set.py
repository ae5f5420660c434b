"""The loaded policies (:class:`PolicySet`): which policy governs a table (the enabled matching policy with
the highest ``priority × 1000 + specificity``, ties broken by name; answers shared by every set whose
enabled policies have the same patterns, since the sensor loads a set every tick), and the cron rules
that become Dagster schedules. The policies themselves: ``core/policies/policy.py``."""

from __future__ import annotations

import threading
from typing import Any, Iterable, Iterator, Mapping, Protocol

from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.patterns import TablePattern
from floe_dagster.core.basics.tables import TableName


class GoverningPolicy(Protocol):
    """What a set reads of a policy: core/policies/policy.py's ``Policy``, whose loaders make sets, so this module
    names what it reads instead of importing it back."""

    name: str
    table_pattern: TablePattern
    enabled: bool
    schedules: Mapping[Operation, Any]  # a Schedule each: its kind, cron_5field and timezone are read

    @property
    def precedence_key(self) -> tuple[int, str]: ...

    def enabled_operations(self) -> list[Operation]: ...

    def matches(self, table: TableName) -> bool: ...

    def to_json(self) -> dict[str, object]: ...

_EFFECTIVE_BY_PATTERNS: dict[tuple[tuple[str, str], ...], dict[TableName, str | None]] = {}
_EFFECTIVE_SETS_KEPT = 4
_EFFECTIVE_LOCK = threading.Lock()


class PolicySet:
    """All loaded policies; answers which one governs a table."""

    def __init__(self, policies: Iterable[GoverningPolicy] = (), warnings: Iterable[str] = ()):
        self._policies = tuple(sorted(policies, key=lambda p: p.name))
        self.warnings = tuple(warnings)  # what loading them warned about, one line each
        self._by_name = {p.name: p for p in self._policies}
        if len(self._by_name) != len(self._policies):
            raise ValueError("policy names must be unique")
        self._enabled = tuple(sorted((p for p in self._policies if p.enabled), key=lambda p: p.precedence_key))
        # By (catalog, namespace): the enabled policies whose pattern may match there (a tick asks of every table,
        # most namespaces hold many).
        self._placed: dict[tuple[str, tuple[str, ...]], tuple[GoverningPolicy, ...]] = {}
        # Which policy wins depends only on the enabled policies' patterns in precedence order. The
        # sensor loads a new PolicySet every tick; sets with the same patterns share their answers.
        matching_key = tuple((p.name, p.table_pattern.text) for p in self._enabled)
        with _EFFECTIVE_LOCK:  # sensors and API requests load policy sets in several threads
            self._effective: dict[TableName, str | None] = _EFFECTIVE_BY_PATTERNS.pop(matching_key, None) or {}
            _EFFECTIVE_BY_PATTERNS[matching_key] = self._effective  # most recent last
            while len(_EFFECTIVE_BY_PATTERNS) > _EFFECTIVE_SETS_KEPT:
                del _EFFECTIVE_BY_PATTERNS[next(iter(_EFFECTIVE_BY_PATTERNS))]

    @property
    def policies(self) -> tuple[GoverningPolicy, ...]:
        return self._policies

    def __iter__(self) -> Iterator[GoverningPolicy]:
        return iter(self._policies)

    def __len__(self) -> int:
        return len(self._policies)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def get(self, name: str) -> GoverningPolicy | None:
        return self._by_name.get(name)

    def matching(self, table: TableName, include_disabled: bool = False) -> list[GoverningPolicy]:
        """Every policy whose pattern matches, the winner first (disabled ones last, when asked for)."""
        candidates = self._policies if include_disabled else self._enabled
        found = [p for p in candidates if p.matches(table)]
        return sorted(found, key=lambda p: (not p.enabled, p.precedence_key))

    def effective_policy(self, table: TableName) -> GoverningPolicy | None:
        """The enabled matching policy with the highest priority × 1000 + specificity, then by name."""
        try:
            name = self._effective[table]
        except KeyError:
            placed = self._placed.get((table.catalog, table.namespace))
            if placed is None:  # the enabled policies that may govern a table there, in precedence order
                placed = self._placed[(table.catalog, table.namespace)] = tuple(
                    p for p in self._enabled if p.table_pattern.matches_place(table.catalog, table.namespace))
            winner = next((p for p in placed if p.table_pattern.matches_name(table)), None)
            name = self._effective[table] = winner.name if winner is not None else None
        return self._by_name[name] if name is not None else None

    def cron_rules(self) -> list[tuple[str, Operation, str, str]]:
        """(policy name, operation, 5-field cron, time zone) for every enabled cron rule: one Dagster
        schedule each. A schedule with an interval is not a cron rule (the interval wins)."""
        rules = []
        for policy in self._enabled:
            for op in policy.enabled_operations():
                schedule = policy.schedules[op]
                if schedule.kind == "cron":
                    rules.append((policy.name, op, schedule.cron_5field, schedule.timezone))
        return sorted(rules, key=lambda r: (r[0], r[1].order))

    def to_json(self) -> list[dict[str, object]]:
        return [p.to_json() for p in self._policies]


__all__ = ["PolicySet"]
