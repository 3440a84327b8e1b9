"""common.fastinit: the quicker __init__ builds the same records the dataclass's own would."""
from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from common.evidence import ArtifactRef, Cleanup, Execution, Report, Status, Usage, Verification
from common.fastinit import fast_init
from coordinator.core import commands as c
from coordinator.core import effects


def _plain(cls: type) -> type:
    """The class as the dataclass decorator alone makes it (its generated __init__)."""
    return dataclasses.dataclass(frozen=True, slots=True)(type(cls.__name__, (), {
        "__annotations__": dict(cls.__annotations__),
        **{f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING},
    }))


@pytest.mark.parametrize("cls", [Report, ArtifactRef, c.CellReported, c.HeartbeatReceived, effects.Emit,
                                 effects.Transition, effects.PushAssignment, effects.CellDispatch])
def test_the_hot_records_have_the_quick_init_with_the_dataclass_signature(cls):
    assert "_set0" in cls.__init__.__code__.co_names
    assert inspect.signature(cls.__init__) == inspect.signature(_plain(cls).__init__)


def test_a_quick_record_is_the_record_the_dataclass_builds():
    ref = ArtifactRef("log", "sha256:" + "a" * 64, 3)
    r = Report(Status.COMPLETED, Execution.COMPLETED, Verification.VALID, Usage.COMPLETE, Cleanup.CONFIRMED,
               score=0.5, cost_usd=0.01, detail="ok", artifacts=(ref,))
    plain = _plain(Report)(Status.COMPLETED, Execution.COMPLETED, Verification.VALID, Usage.COMPLETE,
                           Cleanup.CONFIRMED, score=0.5, cost_usd=0.01, detail="ok", artifacts=(ref,))
    assert dataclasses.astuple(r) == dataclasses.astuple(plain)
    assert r.environment_failure == "" and r.input_tokens is None and r.unavailable == ()  # the defaults
    assert r == dataclasses.replace(r) and hash(r) == hash(dataclasses.replace(r))
    assert pickle.loads(pickle.dumps(r)) == r
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.score = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError, match="missing 5 required positional arguments"):
        Report()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'scroe'"):
        Report(Status.COMPLETED, Execution.COMPLETED, Verification.VALID, Usage.COMPLETE, Cleanup.CONFIRMED,
               scroe=1.0)  # type: ignore[call-arg]


def test_classes_it_cannot_serve_exactly_are_refused():
    @dataclasses.dataclass(slots=True)
    class Mutable:
        x: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            assert self.x >= 0

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        x: list = dataclasses.field(default_factory=list)

    for cls in (Mutable, Checked, Factory):
        with pytest.raises(AssertionError):
            fast_init(cls)
