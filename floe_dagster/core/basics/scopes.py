"""Table scopes for sharded deployments: which code location owns a table.

Several code locations (in ``workspace.yaml``) can split one lakehouse; each owns a scope, and
scopes never overlap:

- named scopes from ``floe.yaml``'s ``shards`` list, each a table pattern; a table belongs to the
  first scope (in file order) whose pattern matches, so ``"*"`` last means "everything else";
- hash shards ``i/n``: a table belongs to shard ``sha256(qualified name) mod n``, stable across
  processes and machines.

Each scope has its own scheduler lock (``floe-scheduler:<scope>``) and its own budgets.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Sequence

from floe_dagster.core.basics.patterns import TablePattern
from floe_dagster.core.basics.tables import TableName

_HASH_SHARD = re.compile(r"^shard_(\d+)_of_(\d+)$")


@dataclass(frozen=True)
class Scope:
    name: str  # "default" for an unsharded location
    patterns: tuple[tuple[str, TablePattern], ...] = ()  # every named scope, in order (named scopes)
    shard: tuple[int, int] | None = None  # (i, n) for hash shards

    def contains(self, table: TableName) -> bool:
        if self.shard is not None:
            index, count = self.shard
            digest = hashlib.sha256(table.qualified.encode()).digest()
            return int.from_bytes(digest[:8], "big") % count == index
        if not self.patterns:
            return True
        owner = next((name for name, pattern in self.patterns if pattern.matches(table)), None)
        return owner == self.name

    def select(self, tables: Sequence[TableName]) -> list[TableName]:
        return [t for t in tables if self.contains(t)]


DEFAULT_SCOPE = Scope("default")


def scope_named(name: str, shards: Sequence[tuple[str, str]]) -> Scope:
    """The scope for a code location attribute: ``shard_<i>_of_<n>`` or a name from ``shards``."""
    match = _HASH_SHARD.match(name)
    if match:
        index, count = int(match.group(1)), int(match.group(2))
        if count < 1 or index >= count:
            raise ValueError(f"hash shard {name!r}: expected shard_<i>_of_<n> with 0 ≤ i < n")
        return Scope(name, shard=(index, count))
    names = [shard_name for shard_name, _ in shards]
    if name not in names:
        raise ValueError(f"no shard named {name!r} in floe.yaml's shards ({', '.join(names) or 'none defined'}); "
                         "hash shards are named shard_<i>_of_<n>")
    return Scope(name, patterns=tuple((shard_name, TablePattern.parse(text)) for shard_name, text in shards))
