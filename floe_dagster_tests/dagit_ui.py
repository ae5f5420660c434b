"""Which run tags Dagit's runs list shows, by the rule of the installed dagster-webserver's UI.

The runs list (OSS: ``RunsFeedRoot`` → ``RunsFeedRow`` → ``RunRowTags``) shows a run's *pinned*
tags and puts the rest behind "View all tags"; the run page's "View tags and config" shows them all.
A tag is pinned by default unless ``useTagPinning``'s ``isUnpinnedByDefaultSystemTag`` says so: a
key under ``dagster/`` other than ``dagster/partition`` and ``dagster/backfill``, or ``mode``
(each browser can change this in its local storage). Dagster's GraphQL never returns ``.dagster/``
keys. :func:`ui_source` reads the UI's own TypeScript from the bundle's source maps, so the tests
can check this port against the installed version.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Mapping

import dagster_webserver

CHUNKS = Path(dagster_webserver.__file__).parent / "webapp" / "build" / "_next" / "static" / "chunks"
SYSTEM_NAMESPACE = "dagster/"  # DagsterTag.Namespace
PINNED_SYSTEM_KEYS = ("dagster/partition", "dagster/backfill")  # DagsterTag.Partition, DagsterTag.Backfill


def pinned_by_default(key: str) -> bool:
    """``!isUnpinnedByDefaultSystemTag(key)`` with nothing pinned or unpinned in the browser."""
    unpinned = (key.startswith(SYSTEM_NAMESPACE) and key not in PINNED_SYSTEM_KEYS) or key == "mode"
    return not unpinned


def runs_list_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """The tags the runs list shows for a run with these tags (as Dagster's GraphQL returns them)."""
    return {key: value for key, value in tags.items() if pinned_by_default(key)}


def ui_source(name: str) -> str:
    """The TypeScript of one UI file (``runs/useTagPinning.tsx``) from the installed bundle's source maps."""
    wanted = f"ui-core/src/{name}"
    for map_file in sorted(CHUNKS.glob("*.js.map")):
        raw = map_file.read_bytes()
        if wanted.encode() not in raw:
            continue
        data = json.loads(raw)
        for source, content in zip(data["sources"], data.get("sourcesContent") or []):
            if source.split("?")[0].endswith(wanted) and content:
                return content
    raise LookupError(f"{name} is not in the source maps under {CHUNKS}")


def function_body(source: str, name: str) -> str:
    """The body of ``function <name>(...) { ... }`` in ``source``, whitespace collapsed."""
    match = re.search(r"function %s\([^)]*\)\s*\{(.*?)\n\}" % re.escape(name), source, re.S)
    if match is None:
        raise LookupError(f"no function {name}")
    return " ".join(match.group(1).split())
