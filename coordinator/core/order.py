"""Dispatch order from history: the longest groups first, by an earlier run's durations.

Rules.
1. Resolved once, when a run is submitted, from the earlier run `policy.order_from` names;
   the resolved order travels in the logged `RunSubmitted`, so replay and recovery read it
   and never recompute it from state that may have changed since (a retry grant reopens a
   settled run).
2. The earlier run must exist, be settled, and be of the same benchmark (name and version).
   Anything else is a typed refusal; the run is then not created.
3. Groups match by task id and repetition (subjects may differ: a new model on the same
   tasks is the point). A group's duration is the longest of its cells, each cell's being
   its selected attempt's (or, without one, its last reported attempt's) time from dispatch
   to report on the coordinator's clock. Groups the earlier run lacks, or never heard a
   report for, go first (an unknown may be long); the rest longest first; ties in spec order.
4. The order changes only which ready group is dispatched next. A retry or a redispatch
   rejoins the ready heap at its group's rank; capacity, selection and accounting are the
   same code for every order.
"""
from __future__ import annotations

from common.ids import TaskId
from common.policy import Policy
from common.rejections import Rejection
from common.spec import ExperimentSpec
from coordinator.core.effects import Outcome, rejected
from coordinator.core.state import RunState, State


def resolve_order(state: State, spec: ExperimentSpec, policy: Policy) -> tuple[int, ...] | Outcome:
    """The dispatch order of a run about to be submitted, or the refusal."""
    if not policy.order_from:
        return ()
    earlier = state.runs.get(policy.order_from)
    if earlier is None:
        return rejected(Rejection.UNKNOWN_RUN, f"orderFrom: run {policy.order_from} does not exist")
    if not earlier.settled:
        return rejected(Rejection.ORDER_RUN_IN_PROGRESS,
                        f"orderFrom: run {policy.order_from} is still in progress "
                        f"({earlier.settled_groups} of {len(earlier.groups)} groups settled)")
    a, b = earlier.spec, spec
    if (a.benchmark_name, a.benchmark_version) != (b.benchmark_name, b.benchmark_version):
        return rejected(Rejection.ORDER_RUN_OTHER_BENCHMARK,
                        f"orderFrom: run {policy.order_from} is of benchmark {a.benchmark_name} "
                        f"version {a.benchmark_version or '(none)'}, not {b.benchmark_name} "
                        f"version {b.benchmark_version or '(none)'}")
    observed = group_durations(state, earlier)
    keys = []
    for index in range(spec.group_count):
        duration = observed.get(spec.group_key(index))
        keys.append((0, 0, index) if duration is None else (1, -duration, index))
    keys.sort()
    return tuple(k[2] for k in keys)


def group_durations(state: State, run: RunState) -> dict[tuple[TaskId, int], int]:
    """(task id, repetition) -> the group's observed duration in ms, for groups with a report."""
    out: dict[tuple[TaskId, int], int] = {}
    for group in run.groups:
        longest = None
        for cid in group.cells:
            cell = run.cells[cid]
            chosen = cell.selected
            if chosen is None:
                for tid in reversed(cell.attempts):
                    if state.attempts[tid].reported:
                        chosen = tid
                        break
            if chosen is None:
                continue
            attempt = state.attempts[chosen]
            took = max(0, attempt.reported_ms - attempt.dispatched_ms)
            longest = took if longest is None else max(longest, took)
        if longest is not None:
            out[run.spec.group_key(group.index)] = longest
    return out


def order_problem(order: tuple[int, ...], group_count: int) -> str:
    """Why a logged order cannot be this run's (empty when it can)."""
    if not order:
        return ""
    if len(order) != group_count or sorted(order) != list(range(group_count)):
        return f"the dispatch order is not a permutation of the run's {group_count} groups"
    return ""
