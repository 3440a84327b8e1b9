"""A quicker, smaller pickle for the many small records of a snapshot.

Pickle's default for a slotted dataclass builds a dict of its slots per object and, on load,
calls a Python helper per object (for frozen ones, `dataclasses.fields()` per object): about
30 us per report at a million cells, which made a snapshot of a large run take tens of
seconds to load. `fast_pickle` gives the class a `__reduce__` of (the bare object, then its
fields in order as list items), read by one C `attrgetter`; loading makes the object with
`cls.__new__` and sets every slot in one generated `extend` call.

Why list items and not the plainer (the class, a tuple of its fields): pickle memoizes every
tuple it writes, and its memo keeps each one alive until the dump ends, as the unpickler's
does while it loads. At a million cells that was 3.8 million tuples held by each side, 384 MB
of the snapshot process's peak while it encoded, and a heap left so fragmented after loading
that the recovered state took 1,470 MB instead of 1,120 (docs/benchmarks.md, issue 26). Items
are written one by one (MARK ... APPENDS) and never memoized. The bytes are as long.

Snapshots written with the tuple form (format v2) still load: their records call the class.
The field list is taken from the dataclass itself, so a field added later is carried without
anyone remembering to. A class with a field that is not an `__init__` parameter is refused at
import.
"""
from __future__ import annotations

import copy
import copyreg
import dataclasses
import math
import operator
import sys
from typing import Any, Callable, TypeVar

T = TypeVar("T")

_ZERO, _ONE = 0.0, 1.0


def canonical_float(value: Any) -> Any:
    """The one shared object for 0.0 and 1.0 (a pass/fail score, a free cell's cost), the value
    itself otherwise (-0.0, None, any other number): a million reports decoded from the wire or
    a snapshot hold two floats each, nearly all of them one of these two, and 24 bytes apiece."""
    if value == 0.0:
        return _ZERO if math.copysign(1.0, value) > 0 else value
    return _ONE if value == 1.0 else value


def canonical_str(value: Any) -> Any:
    """A string many records share, interned: an artifact's name (a few names, "log",
    "trajectory", once per report). Not a digest: one of its own per artifact, interned it would
    only add an entry to the interpreter's table (a report held in the coordinator's state keeps
    its digest packed, coordinator/core/reportpack.py)."""
    return sys.intern(value) if type(value) is str else value


def fast_pickle(cls: type[T] | None = None, *,
                canonical: dict[str, Callable[[Any], Any]] | None = None) -> Any:
    """`@fast_pickle`, or `@fast_pickle(canonical={field: fn})`: on load, those fields are passed
    through `fn` (canonical_float, canonical_str), so that a loaded state shares what the live
    one shares."""
    if cls is None:
        return lambda c: _fast_pickle(c, canonical or {})
    return _fast_pickle(cls, canonical or {})


def _fast_pickle(cls: type[T], canonical: dict[str, Callable[[Any], Any]]) -> type[T]:
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    assert all(f.init for f in fields), f"{cls.__name__}: every field must be an __init__ parameter"
    names = tuple(f.name for f in fields)
    get = operator.attrgetter(*names)
    new = copyreg.__newobj__  # pickle writes NEWOBJ: cls.__new__(cls), no arguments tuple
    bare = (cls,)
    if len(names) == 1:
        def __reduce__(self: Any) -> tuple:
            return (new, bare, None, iter((get(self),)))
    else:
        def __reduce__(self: Any) -> tuple:
            return (new, bare, None, iter(get(self)))
    cls.__reduce__ = __reduce__  # type: ignore[method-assign]
    unknown = set(canonical) - set(names)
    assert not unknown, f"{cls.__name__}: no such fields to make canonical: {sorted(unknown)}"
    cls.extend = _extend(cls, names, canonical)  # type: ignore[attr-defined]

    # The copy module reads `__reduce__` too but adds list items one `append` at a time: copies
    # are made through the constructor instead, as pickle's default did.
    values = (lambda self: (get(self),)) if len(names) == 1 else get

    def __copy__(self: Any) -> Any:
        return cls(*values(self))

    def __deepcopy__(self: Any, memo: dict[int, Any]) -> Any:
        return cls(*copy.deepcopy(values(self), memo))

    cls.__copy__ = __copy__  # type: ignore[attr-defined]
    cls.__deepcopy__ = __deepcopy__  # type: ignore[attr-defined]
    return cls


def _extend(cls: type, names: tuple[str, ...], canonical: dict[str, Callable[[Any], Any]]) -> Any:
    """`extend(self, values)`: every slot set from `values`, in field order, through the slots'
    own descriptors (a frozen class's `__setattr__` refuses; the descriptors do not), the
    canonical fields through their function. A count that differs (a snapshot of another
    build) raises ValueError, and the snapshot is refused."""
    setters = {f"_set_{i}": cls.__dict__[n].__set__ for i, n in enumerate(names)}
    canons = {f"_canon_{i}": canonical[n] for i, n in enumerate(names) if n in canonical}
    values = ", ".join(f"v{i}" for i in range(len(names)))
    body = "\n".join(f"    _set_{i}(self, _canon_{i}(v{i}))" if f"_canon_{i}" in canons else f"    _set_{i}(self, v{i})"
                     for i in range(len(names)))
    source = f"def extend(self, values):\n    {values}, = values\n{body}\n"
    namespace: dict[str, Any] = dict(setters) | canons
    exec(source, namespace)  # noqa: S102 - generated from the dataclass's own field names
    extend = namespace["extend"]
    extend.__qualname__ = f"{cls.__qualname__}.extend"
    return extend
