"""A quicker pickle for the many small records of a snapshot.

Pickle's default for a slotted dataclass builds a dict of its slots per object and, on load,
calls a Python helper per object (for frozen ones, `dataclasses.fields()` per object): about
30 us per report at a million cells, which made a snapshot of a large run take tens of
seconds to load. `fast_pickle` gives the class a `__reduce__` of (the class, its fields in
order), read by one C `attrgetter`; loading is one constructor call. The field list is taken
from the dataclass itself, so a field added later is carried without anyone remembering to.
A class with a field that is not an `__init__` parameter is refused at import.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any, TypeVar

T = TypeVar("T")


def fast_pickle(cls: type[T]) -> type[T]:
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    assert all(f.init for f in fields), f"{cls.__name__}: every field must be an __init__ parameter"
    names = tuple(f.name for f in fields)
    get = operator.attrgetter(*names)
    if len(names) == 1:
        def __reduce__(self: Any) -> tuple:
            return (cls, (get(self),))
    else:
        def __reduce__(self: Any) -> tuple:
            return (cls, get(self))
    cls.__reduce__ = __reduce__  # type: ignore[method-assign]
    return cls
