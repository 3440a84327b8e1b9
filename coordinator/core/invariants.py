"""Invariants of the contract, checked over a whole state (for tests and the simulation).

`check(state)` returns the violations as sentences; `Monitor` also checks what holds
between states: a selected result never changes, attempt ids are never reused, an attempt is
dispatched only to a worker whose measurement matches the run's reference and pin, and the
selected results of a run were all dispatched under one pin (environments never mix).
Costs in proportion to the state: not for the daemon's hot path.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from common.evidence import is_selectable
from coordinator.core.state import (AssignmentState, AttemptState, GroupState, GroupStatus, State, WorkerStatus,
                                    counted_attempts)
from coordinator.core.summary import walk_cell_counts


def check(state: State) -> list[str]:
    bad: list[str] = []
    per_worker: dict[str, int] = {}
    owners: dict[tuple[str, int], str] = {}
    for a in state.assignments.values():
        run = state.runs[a.run_id]
        group = run.groups[a.group_index]
        for tid in a.attempts:
            t = state.attempts[tid]
            if run.cells[t.cell_id].group_index != a.group_index:
                bad.append(f"attempt {tid} of {a.assignment_id} is not of its group")
            if t.assignment_id != a.assignment_id or t.generation != a.generation:
                bad.append(f"attempt {tid} does not point back at {a.assignment_id}")
        if a.authoritative:
            key = (a.run_id, a.group_index)
            if key in owners:
                bad.append(f"group {group.group_id} has two authoritative owners: {owners[key]} and {a.assignment_id}")
            owners[key] = a.assignment_id
            per_worker[a.worker_id] = per_worker.get(a.worker_id, 0) + 1
            if group.assignment != a.assignment_id or group.status != GroupStatus.ASSIGNED:
                bad.append(f"group {group.group_id} does not record its owner {a.assignment_id}")
            if a.assignment_id not in state.workers[a.worker_id].assignments:
                bad.append(f"worker {a.worker_id} does not record {a.assignment_id}")
            unreported = sum(1 for tid in a.attempts if not state.attempts[tid].reported)
            if unreported != a.unreported:
                bad.append(f"{a.assignment_id} counts {a.unreported} unreported, has {unreported}")
            if a.generation != group.generation:
                bad.append(f"{a.assignment_id} generation {a.generation} is not the group's {group.generation}")
            if not runs_unanswered(state, a):
                bad.append(f"{a.assignment_id} still runs, but every cell it runs has a selected result")
    bad.extend(provider_problems(state))
    for wid, n in per_worker.items():
        w = state.workers[wid]
        if n > w.slots:
            bad.append(f"worker {wid} holds {n} groups with {w.slots} slots")
        if len(w.assignments) != n:
            bad.append(f"worker {wid} lists {len(w.assignments)} assignments, holds {n}")
    for wid, w in state.workers.items():
        if wid not in per_worker and w.assignments:
            bad.append(f"worker {wid} lists assignments it does not hold")
        if w.free != (wid in state.free_workers):
            bad.append(f"worker {wid} free-list membership is wrong")
    active_slots = sum(w.slots for w in state.workers.values() if w.status == WorkerStatus.ACTIVE)
    if active_slots != state.slots_active:
        bad.append(f"slots_active {state.slots_active} != {active_slots}")
    for run in state.runs.values():
        active = sum(1 for (r, _g) in owners if r == run.run_id)
        if active != run.active:
            bad.append(f"run {run.run_id} counts {run.active} active, has {active}")
        if active > run.spec.max_concurrent_groups:
            bad.append(f"run {run.run_id} has {active} groups running over its cap {run.spec.max_concurrent_groups}")
        settled = 0
        queued = {run.ready_group(k) for k in run.ready} | {i for _, i in run.backoff}
        for group in run.groups:
            if group.status == GroupStatus.SETTLED:
                settled += 1
            if (group.status == GroupStatus.WAITING) != (group.index in queued):
                bad.append(f"group {group.group_id} waiting={group.status == GroupStatus.WAITING} "
                           f"but queued={group.index in queued}")
            pending = 0
            for cid in group.cells:
                cell = run.cells[cid]
                limit = run.max_attempts(cell)
                if counted_attempts(cell) > limit:
                    bad.append(f"cell {cid} has {counted_attempts(cell)} attempts over its limit {limit}")
                if cell.throttled > run.max_throttled(cell):
                    bad.append(f"cell {cid} has {cell.throttled} throttled attempts over its bound")
                orders = [state.attempts[t].dispatch_order for t in cell.attempts]
                if orders != sorted(orders) or len(set(orders)) != len(orders):
                    bad.append(f"cell {cid} attempts are not in dispatch order")
                if cell.selected is not None:
                    t = state.attempts[cell.selected]
                    if t.cell_id != cid or (r := t.report) is None or not is_selectable(r) or t.late:
                        bad.append(f"cell {cid} selected {cell.selected} without selectable authoritative evidence")
                elif run.attempts_left(cell):
                    pending += 1
            bad.extend(group_status_problems(group, pending))
        if settled != run.settled_groups:
            bad.append(f"run {run.run_id} counts {run.settled_groups} settled groups, has {settled}")
        selected = sum(1 for cell in run.cells.values() if cell.selected is not None)
        if selected != run.selected_cells:
            bad.append(f"run {run.run_id} counts {run.selected_cells} selected cells, has {selected}")
        if selected and run.pin is None:
            bad.append(f"run {run.run_id} has selected results but no pin")
        kept = state.soft.cell_counts.get(run.run_id)
        if kept is not None and kept != walk_cell_counts(run):
            bad.append(f"run {run.run_id} keeps cell counts {kept}, a walk counts {walk_cell_counts(run)}")
    return bad


def runs_unanswered(state: State, a: AssignmentState) -> bool:
    """Whether an authoritative assignment runs a cell without a selected result: once offers
    after a restore answer every cell it runs, it is revoked (machine.py `_revoke_if_answered`),
    and nothing else selects a cell that an authoritative assignment runs."""
    cells = state.runs[a.run_id].cells
    for tid in a.attempts:
        t = state.attempts[tid]
        if not t.reported and cells[t.cell_id].selected is None:
            return True
    return False


@dataclass
class Monitor:
    """Checks across steps: selections are immutable, attempt ids unique forever."""

    selected: dict[tuple[str, str], str] = field(default_factory=dict)  # (run, cell) -> attempt
    attempts_seen: dict[str, str] = field(default_factory=dict)
    dispatch_pin: dict[str, object] = field(default_factory=dict)  # attempt -> its run's pin then
    last_pin: dict[str, object] = field(default_factory=dict)  # run -> its pin at the last observation

    def observe(self, state: State) -> list[str]:
        bad = check(state)
        for run in state.runs.values():
            for cell in run.cells.values():
                key = (run.run_id, cell.cell_id)
                if cell.selected is None:
                    if key in self.selected:
                        bad.append(f"cell {cell.cell_id} lost its selected result {self.selected[key]}")
                    continue
                before = self.selected.setdefault(key, cell.selected)
                if before != cell.selected:
                    bad.append(f"cell {cell.cell_id} selection changed from {before} to {cell.selected}")
        new_attempts = []
        for tid, t in state.attempts.items():
            before = self.attempts_seen.setdefault(tid, t.cell_id)
            if before != t.cell_id:
                bad.append(f"attempt id {tid} reused")
            if tid not in self.dispatch_pin:  # dispatched in this step
                new_attempts.append(t)
                run = state.runs[t.run_id]
                fit = state.workers[t.worker_id].fits.get(t.run_id)
                if fit is None or fit.differences:
                    bad.append(f"attempt {tid} dispatched to {t.worker_id}, which has not measured the run to match")
                elif run.pin != fit.components and not self._pin_released_after(state, t, fit.components):
                    bad.append(f"attempt {tid} dispatched to {t.worker_id}, whose environment is not the run's pin")
                self.dispatch_pin[tid] = run.pin
        for run in state.runs.values():
            pins = {repr(self.dispatch_pin.get(cell.selected)) for cell in run.cells.values() if cell.selected}
            if len(pins) > 1 or (pins and pins != {repr(run.pin)}):
                bad.append(f"run {run.run_id} selected results dispatched under {len(pins)} environments")
            self.last_pin[run.run_id] = run.pin
        # An attempt a restore rebuilt from a worker's offer started nothing: not a dispatch.
        bad.extend(dispatch_problems(state, [t for t in new_attempts if not t.recovered]))
        return bad

    def _pin_released_after(self, state: State, attempt: AttemptState, components: object) -> bool:
        """A dispatch of this step whose pin the same step released (one tick can expire the
        pinning worker, redispatch to another of its build, expire that one and release the pin):
        its run is unpinned, its assignment already ended (a pin is released only with no group
        running), and the pin before this step was the worker's environment or none."""
        return (state.runs[attempt.run_id].pin is None
                and not state.assignments[attempt.assignment_id].authoritative
                and self.last_pin.get(attempt.run_id) in (None, components))


def running_by_provider(state: State) -> dict[str, int]:
    """Cells of authoritative assignments not yet reported, per provider: a walk."""
    running = {name: 0 for name in state.providers}
    for a in state.assignments.values():
        if not a.authoritative:
            continue
        run = state.runs[a.run_id]
        if not run.subject_providers:
            continue
        for tid in a.attempts:
            t = state.attempts[tid]
            if not t.reported:
                name = run.provider_by_subject[run.cells[t.cell_id].subject_id]
                running[name] = running.get(name, 0) + 1
    return running


def provider_problems(state: State) -> list[str]:
    bad = []
    for name, n in running_by_provider(state).items():
        p = state.providers.get(name)
        if p is None:
            bad.append(f"cells run against provider {name}, which has no record")
        elif p.running != n:
            bad.append(f"provider {name} counts {p.running} cells running, has {n}")
        elif p.effective < 0 or (p.declared and p.effective > p.declared):
            bad.append(f"provider {name} has effective limit {p.effective} beyond its declared {p.declared}")
    for run in state.runs.values():
        if run.subject_providers and len(run.subject_providers) != len(run.spec.subjects):
            bad.append(f"run {run.run_id} names {len(run.subject_providers)} providers for {len(run.spec.subjects)} subjects")
    return bad


def dispatch_problems(state: State, new_attempts: list[AttemptState]) -> list[str]:
    """A step's dispatches against the providers' limits: each provider that got new cells is at
    or under its effective limit after the step, or runs just those cells (a group alone may
    exceed the limit: nothing else ran against it)."""
    started: dict[str, int] = {}
    for t in new_attempts:
        run = state.runs[t.run_id]
        if run.subject_providers:
            name = run.subject_providers[run.groups[run.cells[t.cell_id].group_index].cells.index(t.cell_id)]
            started[name] = started.get(name, 0) + 1
    bad = []
    for name, n in started.items():
        p = state.providers[name]
        if p.effective and p.running > p.effective and p.running != n:
            bad.append(f"provider {name} runs {p.running} cells over its effective limit {p.effective}")
    return bad


def group_status_problems(group: GroupState, pending: int) -> list[str]:
    """A group's status against the number of its cells still to run."""
    if group.status == GroupStatus.SETTLED and pending:
        return [f"group {group.group_id} settled with {pending} cells still to run"]
    if group.status == GroupStatus.WAITING and not pending:
        return [f"group {group.group_id} waits with nothing to run"]
    return []
