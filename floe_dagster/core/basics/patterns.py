"""Table patterns (a policy's ``tablePattern``) and their specificity.

Forms:

- ``*`` or blank: every table.
- ``table``, ``ns.table``, ``catalog.ns.table``; with four or more parts the middle ones form a
  nested namespace (``catalog.a.b.table``).
- Globs ``*`` and ``?`` match within one part. A namespace part that is exactly ``*`` matches one or
  more namespace levels, so ``demo.*.orders`` also matches ``demo.eu.sales.orders``.
- ``/regex/`` is matched in full against the whole qualified name ``catalog.ns1.ns2.table``, dots
  included (Floe split regexes on dots, which broke every regex with an escaped dot).

Specificity (Floe's table): catalog exact 100 / wildcard 50, namespace 10 / 5, table 1 / 0. A part the
pattern leaves out counts as a wildcard, and a regex counts as a wildcard at every level (55). A
``?``-only glob counts as exact, as in Floe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from floe_dagster.core.basics.tables import TableName

__all__ = ["TableName", "TablePattern", "MAX_PATTERN_LENGTH"]

MAX_PATTERN_LENGTH = 256

CATALOG_EXACT, CATALOG_WILDCARD = 100, 50
NAMESPACE_EXACT, NAMESPACE_WILDCARD = 10, 5
TABLE_EXACT, TABLE_WILDCARD = 1, 0
REGEX_SPECIFICITY = CATALOG_WILDCARD + NAMESPACE_WILDCARD + TABLE_WILDCARD

# A group that contains a quantifier and is itself repeated, e.g. ``(a+)+``: such regexes can take
# exponential time on a near miss, and the planner matches every pattern against every table.
_NESTED_QUANTIFIER = re.compile(r"\((?:[^()\\]|\\.)*[+*}](?:[^()\\]|\\.)*\)[+*{]")


@dataclass(frozen=True)
class TablePattern:
    text: str
    catalog: str | None = None  # None: not given (any catalog)
    namespace: tuple[str, ...] | None = None  # None: not given (any namespace)
    table: str | None = None  # None: any table
    regex: str | None = None

    @classmethod
    def parse(cls, text: str | None) -> "TablePattern":
        """Parse a pattern; raises ValueError saying what is wrong."""
        if text is None:
            return cls("*")
        if not isinstance(text, str):
            raise ValueError(f"expected text, got {text!r}")
        stripped = text.strip()
        if len(stripped) > MAX_PATTERN_LENGTH:
            raise ValueError(f"is {len(stripped)} characters long; at most {MAX_PATTERN_LENGTH} are allowed")
        if stripped in ("", "*"):
            return cls(stripped or "*")
        if len(stripped) >= 2 and stripped.startswith("/") and stripped.endswith("/"):
            body = stripped[1:-1]
            if not body:
                raise ValueError("the regex between the slashes is empty")
            if _NESTED_QUANTIFIER.search(body):
                raise ValueError(f"regex {body!r} repeats a group that has a quantifier inside (such as (a+)+), "
                                 "which can take exponential time; simplify it")
            try:
                re.compile(body)
            except re.error as exc:
                raise ValueError(f"regex {body!r} does not compile: {exc}") from None
            return cls(stripped, regex=body)
        if stripped.startswith("/") or stripped.endswith("/"):
            raise ValueError("a regex pattern must start and end with '/', e.g. /demo\\.sales\\..*/")
        parts = stripped.split(".")
        if any(not p.strip() for p in parts):
            raise ValueError(f"{stripped!r} has an empty part; write table, ns.table or catalog.ns.table")
        if any(p != p.strip() for p in parts):
            raise ValueError(f"{stripped!r} has spaces around a dot")
        if len(parts) == 1:
            return cls(stripped, table=parts[0])
        if len(parts) == 2:
            return cls(stripped, namespace=(parts[0],), table=parts[1])
        return cls(stripped, catalog=parts[0], namespace=tuple(parts[1:-1]), table=parts[-1])

    @property
    def matches_everything(self) -> bool:
        return self.regex is None and self.catalog is None and self.namespace is None and self.table in (None, "*")

    def matches(self, table: TableName) -> bool:
        return self.matches_place(table.catalog, table.namespace) and self.matches_name(table)

    def matches_place(self, catalog: str, namespace: tuple[str, ...]) -> bool:
        """Whether a table of this catalog and namespace may match, its name aside (a regex: always)."""
        if self.regex is not None:
            return True
        if self.catalog is not None and not _glob(self.catalog).fullmatch(catalog):
            return False
        return self.namespace is None or _namespace_matches(self.namespace, namespace)

    def matches_name(self, table: TableName) -> bool:
        """Whether a table whose place :meth:`matches_place` matches (a regex reads the whole qualified name)."""
        if self.regex is not None:
            return _compiled(self.regex).fullmatch(table.qualified) is not None
        return self.table is None or _glob(self.table).fullmatch(table.name) is not None

    @property
    def specificity(self) -> int:
        if self.regex is not None:
            return REGEX_SPECIFICITY
        catalog = CATALOG_EXACT if self.catalog is not None and "*" not in self.catalog else CATALOG_WILDCARD
        exact_namespace = self.namespace is not None and not any("*" in part for part in self.namespace)
        namespace = NAMESPACE_EXACT if exact_namespace else NAMESPACE_WILDCARD
        table = TABLE_EXACT if self.table is not None and "*" not in self.table else TABLE_WILDCARD
        return catalog + namespace + table

    def __str__(self) -> str:
        return self.text


@lru_cache(maxsize=4096)
def _glob(part: str) -> re.Pattern[str]:
    """Only ``*`` and ``?`` are special (``[`` is an ordinary character, unlike fnmatch)."""
    return re.compile("".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in part), re.DOTALL)


@lru_cache(maxsize=1024)
def _compiled(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


@lru_cache(maxsize=65536)
def _namespace_matches(patterns: tuple[str, ...], names: tuple[str, ...]) -> bool:
    if not patterns:
        return not names
    head, rest = patterns[0], patterns[1:]
    if head == "*":  # one or more levels
        return any(_namespace_matches(rest, names[i:]) for i in range(1, len(names) + 1))
    return bool(names) and _glob(head).fullmatch(names[0]) is not None and _namespace_matches(rest, names[1:])
