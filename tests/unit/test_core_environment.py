"""Environment admission, table-driven over the core: a run compares the whole environment
id by default, or only the cell environment id when its policy says environmentMatch "cell"
(a fleet of workers in several languages); the identity helper is deterministic."""
from __future__ import annotations

import pytest

from common.identity import cell_environment_id
from common.rejections import Rejection
from coordinator.core import commands as c
from coordinator.core.effects import OutcomeKind
from tests.unit.core_helpers import Core, make_policy, pushes


def register(core: Core, wid: str, env: str, cell_env: str):
    return core.apply(c.WorkerRegistered(core.advance(1), wid, 1, 1, env, cell_environment_id=cell_env))


@pytest.mark.parametrize("match, second_env, second_cell, admitted", [
    ("worker", "env-a", "cenv-1", True),
    ("worker", "env-b", "cenv-1", False),  # another build: refused by default
    ("cell", "env-b", "cenv-1", True),  # another build, same cell environment: admitted
    ("cell", "env-a", "cenv-2", False),  # the same build on another bench tree: refused
    ("cell", "env-b", "", False),  # a worker that sends no cell environment cannot join
])
def test_second_worker_admission(match: str, second_env: str, second_cell: str, admitted: bool) -> None:
    core = Core(policy=make_policy(environment_match=match, required_environment_id=""))
    t = register(core, "w1", "env-a", "cenv-1")
    assert pushes(t), "the first worker pins the run and gets work"
    before = core.fingerprint()
    t = register(core, "w2", second_env, second_cell)
    if admitted:
        assert t.outcome.kind == OutcomeKind.ACCEPTED
        assert pushes(t, "w2"), "an admitted worker gets work from the pinned run"
    else:
        assert t.outcome.rejection == Rejection.ENVIRONMENT_MISMATCH, t.outcome
        assert core.fingerprint() == before
    core.assert_replays()


def test_the_cell_environment_ignores_the_implementation() -> None:
    python = {"bench.tree": "ab", "platform.system": "Linux", "python.version": "3.11.7", "fleet.source": "x"}
    node = {"bench.tree": "ab", "platform.system": "Linux", "node.version": "20", "node_worker.source": "y"}
    assert cell_environment_id(python) == cell_environment_id(node)
    assert cell_environment_id(python).startswith("cenv-")
    assert cell_environment_id(dict(python, **{"bench.tree": "cd"})) != cell_environment_id(python)
    assert cell_environment_id(dict(python, **{"tool:sh": "1"})) != cell_environment_id(python)
