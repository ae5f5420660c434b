"""The operation registry: every maintenance operation kind, each declared once in a module of this
package (its config class, its subclass of :class:`~.spec.OperationSpec` and ``SPEC``, that subclass's
one instance).

The kinds are discovered, not listed: every module here except ``spec`` (and names starting with
``_``) is a kind and must define ``SPEC``, so adding a kind adds a module and edits no list.
:data:`SPECS` holds them in Floe's order (``spec.order``); ``core/operations.py`` builds the
``Operation`` enum from them, and the engine side registers each kind's step the same way
(``spark/operation_steps/``).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Iterable, TypeVar

from floe_dagster.core.operation_kinds.spec import OperationSpec

Declared = TypeVar("Declared")  # what a registry package's modules each declare (a spec, an engine step)


def discover(path: Iterable[str], package: str, infrastructure: str, attribute: str,
             kind: type[Declared]) -> list[Declared]:
    """Import every module of a registry package but its ``infrastructure`` one (and names starting with
    ``_``), sorted by name so the order never depends on the file system, and collect each one's
    ``attribute``, which must be a ``kind``: the one discovery rule of both halves of the registry."""
    found = []
    for module in sorted(info.name for info in pkgutil.iter_modules(path)):
        if module == infrastructure or module.startswith("_"):
            continue
        declared = getattr(importlib.import_module(f"{package}.{module}"), attribute, None)
        if not isinstance(declared, kind):
            raise TypeError(f"{package}.{module} is an operation kind module and must define {attribute}, "
                            f"a {kind.__name__}")
        found.append(declared)
    return found


def _discover() -> tuple[OperationSpec, ...]:
    """Every kind module's SPEC, in Floe's order; two kinds sharing a name, key, order or procedure is an error."""
    found: list[OperationSpec] = discover(__path__, __name__, "spec", "SPEC", OperationSpec)
    for what in ("name", "policy_key", "order", "procedure"):
        values = [getattr(spec, what) for spec in found]
        twice = sorted({str(v) for v in values if values.count(v) > 1})
        if twice:
            raise TypeError(f"two operation kinds share the {what} {', '.join(twice)}")
    return tuple(sorted(found, key=lambda spec: spec.order))


SPECS: tuple[OperationSpec, ...] = _discover()
_BY_NAME = {spec.name: spec for spec in SPECS}


def spec_of(kind: str) -> OperationSpec:
    """The spec of an operation (an ``Operation``, a ``str`` enum, or Floe's name of one)."""
    name = getattr(kind, "value", kind)
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown operation kind {name!r}; expected one of {', '.join(_BY_NAME)}") from None


__all__ = ["SPECS", "OperationSpec", "spec_of", "discover"]
