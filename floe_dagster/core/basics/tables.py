"""Table identity: the one place that names an Iceberg table (catalog, nested namespace, name)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True, order=True)
class TableName:
    catalog: str
    namespace: tuple[str, ...]
    name: str

    def __post_init__(self) -> None:
        if not self.name or not self.namespace or not all(self.namespace):
            raise ValueError(f"a table needs a namespace and a name, got {self.qualified!r}")

    @cached_property  # frozen, so computed once: the planner asks for it several times per decision
    def qualified(self) -> str:
        """``catalog.ns1.ns2.table``: the form patterns, tags, the CLI and the API use."""
        return ".".join((self.catalog, *self.namespace, self.name))

    def __hash__(self) -> int:
        # The generated hash builds and hashes a tuple of the three fields on every dict or set lookup (a
        # planner tick makes ~200,000); frozen, so it is kept once computed. String hashes differ between
        # processes, so the kept one is never pickled (``__getstate__``).
        found = self.__dict__.get("_hash")
        if found is None:
            found = self.__dict__["_hash"] = hash((self.catalog, self.namespace, self.name))
        return found

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def namespace_str(self) -> str:
        return ".".join(self.namespace)

    @property
    def identifier(self) -> tuple[str, ...]:
        """The identifier PyIceberg takes (namespace parts and name, without the catalog)."""
        return (*self.namespace, self.name)

    def __str__(self) -> str:
        return self.qualified

    @classmethod
    def parse(cls, text: str, catalog: str) -> "TableName":
        """Parse ``catalog.ns.table`` or ``ns.table`` (nested: ``catalog.a.b.table``).

        A name whose first part is the configured catalog is read as qualified; otherwise the whole
        text is namespace and table in that catalog.
        """
        parts = [p for p in text.strip().split(".")]
        if any(not p for p in parts) or len(parts) < 2:
            raise ValueError(f"table {text!r}: expected catalog.namespace.table or namespace.table")
        if parts[0] == catalog and len(parts) >= 3:
            parts = parts[1:]
        return cls(catalog, tuple(parts[:-1]), parts[-1])
