"""Which tables a ``/regex/`` table pattern matches, matched in a child process with a time limit."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Sequence

from floe_dagster.core.basics.tables import TableName
from floe_dagster.errors import ApiError

REGEX_MATCH_TIMEOUT_S = 5.0
_REGEX_CHILD = """
import json, sys
from floe_dagster.core.basics.patterns import TablePattern
from floe_dagster.core.basics.tables import TableName
request = json.load(sys.stdin)
pattern = TablePattern.parse(request["pattern"])
json.dump([q for c, ns, t, q in request["tables"] if pattern.matches(TableName(c, tuple(ns), t))], sys.stdout)
"""


def regex_matches(pattern: str, tables: Sequence[TableName]) -> list[str]:
    """The tables a ``/regex/`` pattern matches, matched in a child process with a time limit: Python's
    ``re`` holds the GIL while it matches, so a catastrophic regex such as ``/(.|.)*x/`` against a long
    table name would freeze every thread of the server (a denial of service open to any VIEWER)."""
    request = {"pattern": pattern, "tables": [[t.catalog, list(t.namespace), t.name, t.qualified] for t in tables]}
    try:
        done = subprocess.run([sys.executable, "-c", _REGEX_CHILD], input=json.dumps(request), capture_output=True,
                              text=True, timeout=REGEX_MATCH_TIMEOUT_S, check=True)
    except subprocess.TimeoutExpired:
        raise ApiError(400, "INVALID_PATTERN", f"Invalid pattern: regex {pattern!r} takes longer than "
                       f"{REGEX_MATCH_TIMEOUT_S:g} s to match the catalog's table names (catastrophic backtracking)",
                       {"pattern": pattern}) from None
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"matching the regex failed: {exc.stderr.strip()[-500:]}") from None
    return json.loads(done.stdout)
