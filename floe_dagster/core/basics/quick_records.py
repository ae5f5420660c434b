"""A faster ``__init__`` for the frozen dataclasses a planner tick makes by the ten thousand (a schedule's
due verdict, a trigger-condition verdict, a health issue): :func:`quick_init`; :class:`kept_property`, a
``functools.cached_property`` without its lock, for what such a record tells when read; and :func:`kept_on`, for
what a layer above the record's keeps on it (the record's own module cannot import what makes it).

A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__`` read from the
builtins module on every field (the class's own ``__setattr__`` refuses); this one calls it bound once, a
fifth less time for a 13-field verdict. It still sets the fields one by one, as attributes: filling the
instance's ``__dict__`` at once was twice as fast again, but it made a dict of its own for every record
(528 bytes for a condition verdict against 192 kept in the object's inline values: ~130 MB more at 50,000
tables × 8 kinds, where the peak memory is a target too). The record stays the same: the same fields,
defaults, equality, hash, repr, frozen ``__setattr__``; only how a new one is filled changes.
"""

from __future__ import annotations

from dataclasses import MISSING, fields, is_dataclass
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def quick_init(cls: T) -> T:
    """Give the frozen dataclass ``cls`` an ``__init__`` that sets its fields through ``object.__setattr__``
    bound once, with the generated one's parameters (positional or keyword, the same defaults). Refused for a
    class whose construction does more than set fields (``__post_init__``, fields outside ``__init__``,
    keyword-only fields, slots), which this would skip or break."""
    if not is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"quick_init: {cls!r} is not a frozen dataclass")
    if hasattr(cls, "__post_init__") or "__slots__" in cls.__dict__:  # type: ignore[attr-defined]
        raise TypeError(f"quick_init: {cls.__name__} has a __post_init__ or slots")  # type: ignore[attr-defined]
    namespace: dict[str, Any] = {"MISSING": MISSING, "_set": object.__setattr__}
    params, sets, factories = [], [], []
    for f in fields(cls):  # type: ignore[arg-type]
        if not f.init or f.kw_only:
            raise TypeError(f"quick_init: {cls.__name__}.{f.name} is not a plain positional field")  # type: ignore
        if f.default is not MISSING:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=MISSING")
            factories.append(f"    if {f.name} is MISSING: {f.name} = _factory_{f.name}()\n")
        else:
            params.append(f.name)
        sets.append(f"    _set(self, {f.name!r}, {f.name})\n")
    source = f"def __init__(self, {', '.join(params)}):\n" + "".join(factories) + "".join(sets)
    exec(source, namespace)  # as dataclasses makes the generated one
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"  # type: ignore[attr-defined]
    cls.__init__ = init  # type: ignore[misc]
    return cls


class kept_property:
    """``functools.cached_property`` without its lock (Python 3.11's takes an ``RLock`` on every first read): the
    value is made at the first read and kept in the instance's ``__dict__`` under the same name, where later reads
    find it without calling this. For the verdicts a tick makes by the ten thousand and reads once or twice each;
    two threads reading one at once may both make it (the same value: the records are immutable)."""

    def __init__(self, make: Callable[[Any], Any]) -> None:
        self.make, self.name, self.__doc__ = make, make.__name__, make.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        value = instance.__dict__[self.name] = self.make(instance)
        return value


def kept_on(record: Any, name: str, make: Callable[..., T], *args: Any) -> T:
    """What ``make(*args)`` made, kept on the immutable ``record`` under ``name`` (not a field: equality, hashing and
    asdict ignore it), as :class:`kept_property` keeps its values: for a value a module above the record's makes
    from it (a plan's run class of a schedule, whether a table's properties set owner keys), which the record
    cannot name as a property without importing that module. ``make`` returns anything but None."""
    kept = record.__dict__
    found = kept.get(name)
    if found is None:
        found = kept[name] = make(*args)
    return found
