"""Reading policy files: which files the settings' paths hold (a folder is read file by file: ``*.yaml``,
``*.yml``, ``*.json``, not recursively, hidden files skipped) and the policies in one file's text, as
written, each with its format (``core/policies/policy_formats.py``). YAML is read with YAML 1.2's scalars where
YAML 1.1 surprises (``02:30`` is text, ``off`` is text, a duplicate key is an error); what a file's
text cannot be read as is reported with its line and column. ``core/policies/policy.py`` parses the entries.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

import yaml

from floe_dagster.core.policies.policy_formats import PolicyEntry, policy_entries
from floe_dagster.core.basics.validation import Problems, one_line

POLICY_FILE_SUFFIXES = (".yaml", ".yml", ".json")


def folder_policy_files(folder: Path) -> list[Path]:
    """The policy files a folder holds, as loading reads them: ``*.yaml``, ``*.yml``, ``*.json``, not
    recursively, hidden files skipped, by name."""
    return sorted(p for p in folder.iterdir()
                  if p.is_file() and p.suffix.lower() in POLICY_FILE_SUFFIXES and not p.name.startswith("."))


def policy_files(paths: Iterable[str | Path], problems: Problems) -> list[str]:
    files: list[str] = []
    seen: set[Path] = set()
    if isinstance(paths, (str, Path)):
        paths = [paths]
    for entry in paths:
        path = Path(entry)
        if path.is_dir():
            found = folder_policy_files(path)
            if not found:
                problems.warnings.append(f"{entry}: no policy files (*.yaml, *.yml, *.json) in this folder")
            candidates = found
        elif path.is_file():
            candidates = [path]
        else:
            problems.errors.append(f"{entry}: no such file or folder")
            continue
        for candidate in candidates:
            key = candidate.resolve()
            if key not in seen:
                seen.add(key)
                files.append(str(candidate))
    return files


def read_policy_file(file: str, problems: Problems) -> list[PolicyEntry]:
    try:
        text = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.errors.append(f"{file}: cannot read: {exc}")
        return []
    raws = parse_text(text, file, problems, json_file=file.lower().endswith(".json"))
    if not raws and not problems.errors:
        problems.warnings.append(f"{file}: holds no policies")
    return raws


def parse_text(text: str, source: str, problems: Problems, json_file: bool) -> list[PolicyEntry]:
    """The policies in one file, as written, each with its format (what is not a mapping is reported
    by parse_policy)."""
    if json_file:
        try:
            documents = [json.loads(text)] if text.strip() else []
        except json.JSONDecodeError as exc:
            problems.errors.append(f"{source}: line {exc.lineno}, column {exc.colno}: invalid JSON: {exc.msg}")
            return []
    else:
        try:
            documents = [d for d in yaml.load_all(text, Loader=_PolicyLoader) if d is not None]
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
            problem = " ".join(str(p) for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p)
            problems.errors.append(one_line(f"{source}: {where}invalid YAML: {problem or exc}"))
            return []
    return policy_entries(documents, source, problems)


class _PolicyLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 scalars where YAML 1.1 surprises: ``02:30`` is text (not the base-60
    number 150), only true/false are booleans (``name: off`` is the text "off", not false), and a
    duplicate key is an error (the last would silently win)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            keys: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if isinstance(key, (str, int, float, bool)) and key in keys:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping", node.start_mark,
                        f"found duplicate key {key!r} (first at line {keys[key].line + 1})", key_node.start_mark)
                if isinstance(key, (str, int, float, bool)):
                    keys[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


_PolicyLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers
            if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_PolicyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
# Integers and floats again, without the base-60 forms (``190:20:30``).
_PolicyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(r"""^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$""", re.X),
    list("-+0123456789"),
)
_PolicyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
                    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


__all__ = ["POLICY_FILE_SUFFIXES", "folder_policy_files", "policy_files", "read_policy_file", "parse_text"]
