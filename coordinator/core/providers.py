"""Model providers: a fleet-wide resource of the core (pure, like the rest of it).

A subject's requests go to one provider (the spec's `subjects[].provider`, else the policy's
`providers.NAME.subjects`, else the shared "default"). Every provider has one record in
`state.providers`, shared by every run on the coordinator that names it, and a limit of cells
running against it at once:

- **Dispatch.** A group is dispatched only when, for every provider its pending cells use, the
  cells running against it plus the group's fit under the effective limit, or nothing runs
  against it at all (a group larger than the limit still runs, alone). A group that does not
  fit waits; `machine._fill` passes over it to a group that fits.
- **Running** counts the cells of authoritative assignments that have not reported: a cell
  stops counting when it reports or when its assignment ends.
- **The effective limit adapts.** A declared limit (`maxConcurrentCells`; several unsettled
  runs declaring one: the smallest) is where it starts and what it never exceeds. A named
  provider without one starts at limits.PROVIDER_INITIAL_CELLS; the unnamed "default" has no
  limit until it throttles. Until the first throttled attempt the limit grows by one per
  attempt that was not throttled while at least half of it was in use (slow start: it doubles
  per round of cells). A throttled attempt lowers it to the cells that were running when it
  was refused, less one: the provider admitted fewer than that. After that it grows by one
  per limits.PROVIDER_PROBE_FACTOR times its value in attempts that were not throttled.
- **Throttled attempts** are not attempts: they count against `maxThrottledAttemptsPerCell`
  only, and the group waits for the provider's retry-after before it is dispatched again.

Every change happens inside the step of a logged command (a report, a dispatch, a submit), so
replaying the log rebuilds each provider exactly.
"""
from __future__ import annotations

from common import limits
from common.evidence import Report
from common.policy import Policy
from common.spec import ExperimentSpec
from coordinator.core.effects import Emit
from coordinator.core.state import CellState, GroupState, ProviderState, RunState, State

DEFAULT_PROVIDER = "default"


def subject_providers(spec: ExperimentSpec, policy: Policy) -> tuple[str, ...] | str:
    """The provider of each subject, in spec order; or what is wrong, in one line."""
    mapped: dict[str, str] = {}
    for p in policy.providers:
        for sid in p.subjects:
            mapped[sid] = p.name
    known = {s.id for s in spec.subjects}
    for sid, name in mapped.items():
        if sid not in known:
            return f"policy providers.{name}.subjects names {sid!r}, which is not a subject of the spec"
    out = []
    for s in spec.subjects:
        in_policy = mapped.get(s.id)
        if s.provider and in_policy and in_policy != s.provider:
            return (f"subject {s.id!r} names provider {s.provider!r} in the spec, "
                    f"and the policy maps it to {in_policy!r}")
        out.append(s.provider or in_policy or DEFAULT_PROVIDER)
    if len(set(out)) > limits.PROVIDERS_PER_RUN_MAX:
        return f"the subjects use {len(set(out))} providers, more than {limits.PROVIDERS_PER_RUN_MAX}"
    return tuple(out)


def register(state: State, run: RunState) -> None:
    """A run was submitted: every provider it uses gets its record, and declared limits move."""
    for name in dict.fromkeys(run.subject_providers):
        if name not in state.providers:
            named = name != DEFAULT_PROVIDER or run.policy.provider_limit(name) is not None
            state.providers[name] = ProviderState(name, limits.PROVIDER_INITIAL_CELLS if named else 0)
    refresh_declared(state)


def refresh_declared(state: State) -> None:
    """Each provider's declared limit, from the unsettled runs that declare one (the smallest);
    the effective limit never exceeds it, and follows it while nothing was ever throttled."""
    if not state.providers:
        return
    declared: dict[str, int] = {}
    for run in state.runs.values():
        if run.settled or not run.subject_providers:
            continue
        for p in run.policy.providers:
            if p.max_concurrent_cells:
                declared[p.name] = min(declared.get(p.name, p.max_concurrent_cells), p.max_concurrent_cells)
    for provider in state.providers.values():
        cap = declared.get(provider.name, 0)
        provider.declared = cap
        if cap and (provider.slow_start or not provider.effective or provider.effective > cap):
            provider.effective = cap


def demand(run: RunState, group: GroupState, pending: list[CellState]) -> dict[str, int]:
    """Cells per provider that dispatching `pending` of `group` would start."""
    if not run.subject_providers:
        return {}
    want = {cell.cell_id for cell in pending}
    need: dict[str, int] = {}
    for i, cid in enumerate(group.cells):  # a group's cells are in subject order
        if cid in want:
            name = run.subject_providers[i]
            need[name] = need.get(name, 0) + 1
    return need


def blocking(state: State, need: dict[str, int]) -> str:
    """The first provider that cannot take `need` now; empty when every one can."""
    for name, cells in need.items():
        p = state.providers[name]
        if p.effective and p.running and p.running + cells > p.effective:
            return name
    return ""


def started(state: State, need: dict[str, int]) -> None:
    for name, cells in need.items():
        p = state.providers[name]
        p.running += cells
        if p.running > p.peak_running:
            p.peak_running = p.running


def stopped(state: State, run: RunState, group: GroupState, cell_id: str) -> None:
    """A cell of an ending assignment that never reported stops counting against its provider."""
    if run.subject_providers:
        state.providers[run.provider_by_subject[run.cells[cell_id].subject_id]].running -= 1


def reported(state: State, run: RunState, group: GroupState, cell: CellState, report: Report,
             authoritative: bool, now: int, fx: list) -> None:
    """A report of one of the cell's attempts arrived: the cell stops counting (if its assignment
    still held it), and the provider's limit learns from what happened."""
    if not run.subject_providers:
        return
    p = state.providers[run.provider_by_subject[cell.subject_id]]
    running_before = p.running
    if authoritative:
        p.running -= 1
    if report.throttled:
        p.throttled += 1
        p.retry_after_ms_total += retry_after_ms(report)
        p.last_throttled_ms, p.last_throttled = now, report.throttled
        if not authoritative:
            return  # what was running when a superseded attempt was refused is not known here
        lowered = max(1, running_before - 1)
        p.slow_start = False
        p.credit = 0
        if not p.effective or lowered < p.effective:
            was = p.effective
            p.effective = lowered
            fx.append(Emit("provider_limit_lowered", run.run_id, p.name,
                           f"{was or 'no limit'} -> {lowered} cells: throttled with {running_before} running "
                           f"({report.throttled})"))
        return
    if not authoritative or not p.effective:
        return
    ceiling = p.declared or limits.PROVIDER_CELLS_MAX
    if p.effective >= ceiling or running_before * 2 < p.effective:
        return  # at its ceiling, or not in use enough for this success to say anything
    if p.slow_start:
        p.effective += 1
        return
    p.credit += 1
    if p.credit >= limits.PROVIDER_PROBE_FACTOR * p.effective:
        p.credit = 0
        p.effective += 1
        fx.append(Emit("provider_limit_raised", run.run_id, p.name,
                       f"{p.effective - 1} -> {p.effective} cells after "
                       f"{limits.PROVIDER_PROBE_FACTOR * (p.effective - 1)} attempts not throttled"))


def retry_after_ms(report: Report) -> int:
    """How long a throttled attempt's cell waits before it is dispatched again."""
    if report.retry_after_ms > 0:
        return min(report.retry_after_ms, limits.RETRY_AFTER_MS_MAX)
    return limits.THROTTLE_RETRY_AFTER_MS_DEFAULT
