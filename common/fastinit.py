"""A quicker `__init__` for the frozen, slotted dataclasses made once or more per cell.

A frozen dataclass's generated `__init__` sets each field with `object.__setattr__(self,
name, value)`, which looks the name up on the type every time: 2.3 us for a `Report` of 16
fields, and a report passes through half a dozen such records between its frame and its
log record (tools/bench/report_path.py). `fast_init` gives the class an `__init__` of the
same signature that calls each slot's own descriptor (`Cls.__dict__[name].__set__`),
about half the time. The class stays frozen (its `__setattr__` still refuses), equal and
hashed as before; the field list and defaults are read from the dataclass, so a field added
later is carried without anyone remembering to. A class this cannot serve exactly (not
frozen and slotted, a field outside `__init__`, a default factory, a `__post_init__`) is
refused at import.
"""
from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def fast_init(cls: type[T]) -> type[T]:
    params = getattr(cls, "__dataclass_params__", None)
    assert params is not None and params.frozen and "__slots__" in cls.__dict__, \
        f"{cls.__name__}: fast_init serves frozen dataclasses with slots"
    assert not hasattr(cls, "__post_init__"), f"{cls.__name__}: a __post_init__ would be skipped"
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names: dict[str, Any] = {}
    args = []
    body = []
    for i, f in enumerate(fields):
        assert f.init, f"{cls.__name__}.{f.name}: every field must be an __init__ parameter"
        assert f.default_factory is dataclasses.MISSING, f"{cls.__name__}.{f.name}: a default factory"
        if f.kw_only:
            raise AssertionError(f"{cls.__name__}.{f.name}: keyword-only fields are not served")
        names[f"_set{i}"] = cls.__dict__[f.name].__set__
        if f.default is dataclasses.MISSING:
            args.append(f.name)
        else:
            names[f"_default{i}"] = f.default
            args.append(f"{f.name}=_default{i}")
        body.append(f"    _set{i}(self, {f.name})")
    source = f"def __init__(self, {', '.join(args)}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(source, names)  # noqa: S102 - built from the dataclass's own field names only
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = {**{f.name: f.type for f in fields}, "return": None}
    cls.__init__ = init  # type: ignore[misc]
    return cls


def fast_init_all(namespace: dict[str, Any]) -> None:
    """`fast_init` every frozen slotted dataclass defined in a module (its `globals()`)."""
    module = namespace["__name__"]
    for value in list(namespace.values()):
        if (isinstance(value, type) and value.__module__ == module and dataclasses.is_dataclass(value)
                and value.__dataclass_params__.frozen and "__slots__" in value.__dict__):  # type: ignore[attr-defined]
            fast_init(value)
