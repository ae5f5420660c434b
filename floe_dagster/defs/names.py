"""Dagster names derived from table and policy names.

- Asset keys keep the real names.
- Names people read in Dagit (groups, schedules, jobs) must match Dagster's ``^[A-Za-z0-9_]+$``
  (``dagster._core.definitions.utils.VALID_NAME_REGEX``; no length limit). They are the real name
  with only what Dagster refuses replaced (:func:`readable_name`), made unique over the whole set
  they belong to (:func:`unique_names`), so they cannot be turned back into the real name: whoever
  needs the real name keeps the mapping (:func:`group_names_for`).
- Output names, which nobody reads, use a reversible escape (:func:`escaped_name`).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from typing import Iterable, Sequence

from dagster import AssetKey

from floe_dagster.core.operations import Operation
from floe_dagster.core.basics.tables import TableName

# The job every maintenance run belongs to (the operation is its partition).
MAINTENANCE_JOB = "floe_maintenance"
# The Spark engine's resource key: prefixed, because a Dagster project that adds floe-dagster as a
# component merges its resources with the user's own, and Dagster refuses two with one key.
ENGINE_RESOURCE = "floe_engine"
# The coordination database's resource key (coordination/resource.py), prefixed the same way.
COORDINATION_RESOURCE = "floe_coordination"

# Runs of what Dagster's VALID_NAME_REGEX_STR (``^[A-Za-z0-9_]+$``) accepts.
_VALID_RUNS = re.compile(r"[A-Za-z0-9_]+")
# Hex digits of the suffix that tells colliding names apart (24 bits; longer only if it clashes).
_HASH_DIGITS = 6


def readable_name(text: str) -> str:
    """``sales`` and ``ops_maintenance`` stay as they are; ``ops-maintenance`` becomes
    ``ops_maintenance``, ``sales.eu`` ``sales_eu``, ``ventes été`` ``ventes_ete``, ``web logs (old)``
    ``web_logs_old``, ``straße`` ``stra_e``: accents are dropped and each run of other characters
    between kept ones becomes one ``_``. Empty when nothing is left (``日本``)."""
    # NFKD splits an accented letter into the letter and its accent (a combining mark, dropped).
    folded = "".join(ch for ch in unicodedata.normalize("NFKD", text) if not unicodedata.combining(ch))
    return "_".join(_VALID_RUNS.findall(folded))


def unique_names(sources: Iterable[str]) -> dict[str, str]:
    """A valid, distinct Dagster name for each source, readable, and stable as sources come and go.

    A source that is already a valid name keeps it, always. Any other source gets its
    :func:`readable_name` while no other source has the same readable name; the sources that share
    one (``ops-maintenance`` and ``ops.maintenance``, or ``ops-maintenance`` beside a policy named
    ``ops_maintenance``) each get it followed by ``_`` and the first hex digits of the SHA-256 of
    their own text (``ops_maintenance_06a325``), as does a source with no readable name at all (the
    digits alone). So a new source can change only the names of the sources it collides with, never
    an unrelated one's, and a suffixed name depends only on its own source."""
    ordered = sorted(set(sources))
    readable = {source: readable_name(source) for source in ordered}
    claimants = Counter(readable.values())
    names = {
        source: name for source, name in readable.items()
        if name == source or (name and claimants[name] == 1)
    }
    taken = set(names.values())
    for source in ordered:
        if source not in names:
            names[source] = _suffixed(readable[source], source, taken)
            taken.add(names[source])
    return names


def _suffixed(readable: str, source: str, taken: set[str]) -> str:
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
    for digits in range(_HASH_DIGITS, len(digest) + 1, 2):  # longer only if it clashes (never seen)
        name = f"{readable}_{digest[:digits]}" if readable else digest[:digits]
        if name not in taken:
            return name
    raise AssertionError(f"no unique Dagster name for {source!r}")  # a SHA-256 clash


def group_names_for(namespaces: Iterable[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """The asset group of each namespace: its dotted name made readable and unique among these
    namespaces (``sales.eu`` -> ``sales_eu``; see :func:`unique_names`). ``("a", "b")`` and
    ``("a.b",)`` share a group: both are shown as ``a.b``."""
    dotted = {namespace: ".".join(namespace) for namespace in set(namespaces)}
    names = unique_names(dotted.values())
    return {namespace: names[text] for namespace, text in dotted.items()}


def schedule_names_for(rules: Iterable[tuple[str, Operation]]) -> dict[tuple[str, Operation], str]:
    """``floe_<policy>_<operation>`` for each (policy, operation) cron rule, e.g.
    ``floe_ops_maintenance_orphan_cleanup``; the policy part is unique among these policies (see
    :func:`unique_names`). No operation's name ends with ``_`` and another's, so distinct rules
    never share a name."""
    rules = list(rules)
    policies = unique_names(policy for policy, _ in rules)
    return {(policy, op): f"floe_{policies[policy]}_{op.value.lower()}" for policy, op in rules}


def escaped_name(parts: Sequence[str]) -> str:
    """A reversible, collision-free Dagster name for a key's parts (output names, which nobody reads):
    letters and digits stay, ``_`` becomes ``__`` and any other character ``_x<hex>_``, parts joined
    by ``_x2f_`` (``/``, which no mappable table name contains: :func:`unmappable_reason`)."""
    out = []
    for ch in "/".join(parts):
        if ch.isascii() and ch.isalnum():
            out.append(ch)
        elif ch == "_":
            out.append("__")
        else:
            out.append(f"_x{ord(ch):x}_")
    return "".join(out)


def output_name_for(table: TableName) -> str:
    """A Python identifier for the table's output in the multi-asset, unique per table."""
    return "t_" + escaped_name((table.catalog, *table.namespace, table.name))


def asset_key_for(table: TableName) -> AssetKey:
    return AssetKey([table.catalog, *table.namespace, table.name])


def table_for_asset_key(key: AssetKey) -> TableName:
    catalog, *namespace, name = key.path
    return TableName(catalog, tuple(namespace), name)


def unmappable_reason(table: TableName) -> str | None:
    """Why a table cannot become an asset, or None. Control characters and ``/`` would break
    Dagit's asset URLs and log lines; everything else is kept as it is."""
    for part in (table.catalog, *table.namespace, table.name):
        if any(ord(ch) < 32 or ch == "\x7f" for ch in part):
            return f"table {table.qualified!r} has a control character in its name"
        if "/" in part:
            return f"table {table.qualified!r} has '/' in its name, which Dagit cannot show in an asset path"
    return None
