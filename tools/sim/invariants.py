"""The contract's invariants checked on what one command touched, for simulations at scale.

`coordinator.core.invariants` checks a whole state: right after every command it costs in
proportion to the run, which at 1,000,000 cells and millions of commands cannot be paid. This
checker keeps a mirror of what the invariants are about (who owns each group, what each worker
holds, each cell's selection, each attempt's cell and the environment it was dispatched under,
the run's counters) and, after a command, checks only the workers, assignments, groups and
cells that the command, the durable commands it led to and its effects name, and every
counter of the run against the mirror's (O(1) each). What a command could change without
naming it is caught by the counters (a release nobody named leaves `run.active` disagreeing
with the mirror's owners) and, for certain, by `checkpoint`: the whole-state `check` plus a
comparison of the whole mirror with the state. The simulation runs a checkpoint every N
commands, after each coordinator restart and at the end.

Invariants, as in coordinator/core/invariants.py: a group has at most one authoritative
owner, which it and its worker record; a worker holds no more groups than its slots; the
free list and `slots_active` follow the workers; a cell never exceeds its counted attempts
(less the throttled and the forgiven: `counted_attempts`), its attempts are in dispatch
order, and its selected attempt is its own, reported, selectable and authoritative; a selection never changes or disappears; attempt ids are never reused; an
attempt is dispatched only to a worker whose measurement matches the run and its pin, and a
run's selected results were all dispatched under one pin; a waiting group is queued and has
cells to run, a settled one has none; the run's counters (active, settled, selected, queued)
are exact. One more, from the contract: a redispatch carries only cells without a selected
result (a cell selected before is never dispatched again).

`provider_step_problems` recounts the model providers' contract after a step of the default
simulation's providers scenario (`python -m tools.sim --providers`): dispatches under the
effective limits, throttled attempts never selected nor counted as attempts, retry-afters kept.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from common import limits
from common.evidence import is_selectable
from coordinator.core import commands as c
from coordinator.core.effects import Emit, PushAssignment, RefuseRun, RevokeAssignment, Transition
from coordinator.core.invariants import check, group_status_problems, running_by_provider, runs_unanswered
from coordinator.core.state import AttemptState, GroupStatus, State, WorkerStatus, counted_attempts

# Commands that may change every worker (recovery sets all to reconciling; a pin or a new
# run re-judges every worker's fit): after these, every worker counts as touched.
_EVERY_WORKER = (c.CoordinatorRecovered, c.RunSubmitted, c.RunPinReleased, c.RunRecovered)
_GROUP_EVENTS = ("cell_selected", "cell_exhausted", "cell_retry_granted")
_WAITING, _ASSIGNED, _SETTLED = int(GroupStatus.WAITING), int(GroupStatus.ASSIGNED), int(GroupStatus.SETTLED)


@dataclass
class RunMirror:
    status: bytearray  # per group index, its GroupStatus as last seen
    cap: int
    counts: dict[int, int]  # GroupStatus -> groups
    active: int = 0  # authoritative owners in the mirror
    selected: int = 0
    selected_pin: int = -1  # the pin (index into IncrementalMonitor.pins) of its selected results


@dataclass
class IncrementalMonitor:
    incremental_checks: int = 0
    entities_checked: int = 0
    checkpoints: int = 0
    selection_changes: int = 0  # never more than 0 without a violation; reported as "duplicated"
    runs: dict[str, RunMirror] = field(default_factory=dict)
    selected: dict[tuple[str, str], str] = field(default_factory=dict)  # (run, cell) -> attempt
    attempt_cell: dict[str, str] = field(default_factory=dict)  # every attempt id ever seen -> its cell
    attempt_pin: dict[str, int] = field(default_factory=dict)  # attempt -> its run's pin at dispatch
    pins: list[object] = field(default_factory=list)
    pin_index: dict[object, int] = field(default_factory=dict)
    owner: dict[tuple[str, int], str] = field(default_factory=dict)  # (run, group) -> authoritative aid
    held: dict[str, dict[str, None]] = field(default_factory=dict)  # worker -> authoritative aids
    worker_view: dict[str, tuple[int, bool]] = field(default_factory=dict)  # worker -> (active slots, free)
    slots_active: int = 0
    free: int = 0
    assignments_made: int = 0

    # --- after one command -------------------------------------------------------------------
    def observe(self, state: State, command: object, t: Transition) -> list[str]:
        """Check what `command` (and the durable commands and effects it led to) touched."""
        bad: list[str] = []
        self.incremental_checks += 1
        workers: dict[str, None] = {}
        aids: dict[str, None] = {}
        groups: dict[tuple[str, int], None] = {}
        new_attempts: list[tuple[PushAssignment, object]] = []
        every_worker = False
        for cmd in (command, *t.durable):
            if isinstance(cmd, _EVERY_WORKER):
                every_worker = True
            if isinstance(cmd, c.RunSubmitted) and cmd.run_id in state.runs and cmd.run_id not in self.runs:
                run = state.runs[cmd.run_id]
                self.runs[cmd.run_id] = RunMirror(bytearray([_WAITING]) * len(run.groups),
                                                  run.spec.max_concurrent_groups,
                                                  {_WAITING: len(run.groups), _ASSIGNED: 0, _SETTLED: 0})
            wid = getattr(cmd, "worker_id", None)
            if wid is not None and wid in state.workers:
                workers[wid] = None
            aid = getattr(cmd, "assignment_id", None)
            if aid is not None:
                aids[aid] = None
            tid = getattr(cmd, "attempt_id", None)
            if tid is not None and tid in state.attempts:
                aids[state.attempts[tid].assignment_id] = None
            if isinstance(cmd, c.CellRetryGranted) and cmd.run_id in state.runs:
                cell = state.runs[cmd.run_id].cells.get(cmd.cell_id)
                if cell is not None:
                    groups[(cmd.run_id, cell.group_index)] = None
            for aid in getattr(cmd, "owned", ()):
                aids[aid] = None
        for e in t.effects:
            if isinstance(e, PushAssignment):
                workers[e.worker_id] = None
                aids[e.assignment_id] = None
                for d in e.cells:
                    seen = self.attempt_cell.get(d.attempt_id)
                    if seen is None:
                        new_attempts.append((e, d))
                    elif seen != d.cell_id:
                        bad.append(f"attempt id {d.attempt_id} reused (was of {seen}, now {d.cell_id})")
            elif isinstance(e, (RevokeAssignment, RefuseRun)):
                workers[e.worker_id] = None
                if isinstance(e, RevokeAssignment):
                    aids[e.assignment_id] = None
            elif isinstance(e, Emit):
                if e.event in _GROUP_EVENTS and e.run_id in state.runs:
                    cell = state.runs[e.run_id].cells.get(e.subject)
                    if cell is not None:
                        groups[(e.run_id, cell.group_index)] = None
                elif e.event == "assignment_superseded":
                    aids[e.subject] = None
        if every_worker:
            workers = dict.fromkeys(state.workers)
        self._dispatched(state, new_attempts, bad)
        for wid in workers:
            # Whatever entered or left a worker's list of assignments is touched.
            mine = self.held.get(wid, {})
            now = state.workers[wid].assignments
            for aid in mine:
                if aid not in now:
                    aids[aid] = None
            for aid in now:
                if aid not in mine:
                    aids[aid] = None
        for aid in aids:
            a = state.assignments.get(aid)
            if a is not None:
                groups[(a.run_id, a.group_index)] = None
                self._assignment(state, aid, bad)
        for wid in workers:
            self._worker(state, wid, bad)
        for key in groups:
            self._group(state, key[0], key[1], bad)
        self._counters(state, bad)
        self.entities_checked += len(workers) + len(aids) + len(groups)
        return bad

    def _pin_id(self, pin: object) -> int:
        index = self.pin_index.get(pin)
        if index is None:
            index = self.pin_index[pin] = len(self.pins)
            self.pins.append(pin)
        return index

    def _dispatched(self, state: State, new_attempts: list, bad: list[str]) -> None:
        pushes: dict[str, None] = {}
        for push, d in new_attempts:
            run = state.runs[push.run_id]
            if (push.run_id, d.cell_id) in self.selected:
                bad.append(f"cell {d.cell_id} dispatched again ({d.attempt_id}) after its result "
                           f"{self.selected[(push.run_id, d.cell_id)]} was selected")
            t = state.attempts.get(d.attempt_id)
            if t is None or t.cell_id != d.cell_id or t.assignment_id != push.assignment_id:
                bad.append(f"pushed attempt {d.attempt_id} is not recorded as dispatched by {push.assignment_id}")
                continue
            fit = state.workers[push.worker_id].fits.get(push.run_id)
            if fit is None or fit.differences:
                bad.append(f"attempt {d.attempt_id} dispatched to {push.worker_id}, "
                           "which has not measured the run to match")
            elif run.pin != fit.components:
                bad.append(f"attempt {d.attempt_id} dispatched to {push.worker_id}, whose environment is not the run's pin")
            self.attempt_cell[d.attempt_id] = d.cell_id
            self.attempt_pin[d.attempt_id] = self._pin_id(run.pin)
            pushes[push.assignment_id] = None
        self.assignments_made += len(pushes)

    def _assignment(self, state: State, aid: str, bad: list[str]) -> None:
        a = state.assignments[aid]
        run = state.runs[a.run_id]
        group = run.groups[a.group_index]
        mirror = self.runs[a.run_id]
        unreported = 0
        for tid in a.attempts:
            t = state.attempts[tid]
            if run.cells[t.cell_id].group_index != a.group_index:
                bad.append(f"attempt {tid} of {aid} is not of its group")
            if t.assignment_id != aid or t.generation != a.generation:
                bad.append(f"attempt {tid} does not point back at {aid}")
            unreported += not t.reported
        key = (a.run_id, a.group_index)
        owner = self.owner.get(key)
        if a.authoritative:
            if owner is not None and owner != aid:
                if state.assignments[owner].authoritative:
                    bad.append(f"group {group.group_id} has two authoritative owners: {owner} and {aid}")
                mirror.active -= 1  # the older owner's release is seen here
            if owner != aid:
                self.owner[key] = aid
                mirror.active += 1
            if group.assignment != aid or group.status != GroupStatus.ASSIGNED:
                bad.append(f"group {group.group_id} does not record its owner {aid}")
            if aid not in state.workers[a.worker_id].assignments:
                bad.append(f"worker {a.worker_id} does not record {aid}")
            if unreported != a.unreported:
                bad.append(f"{aid} counts {a.unreported} unreported, has {unreported}")
            if a.generation != group.generation:
                bad.append(f"{aid} generation {a.generation} is not the group's {group.generation}")
        else:
            if owner == aid:
                del self.owner[key]
                mirror.active -= 1
            if aid in state.workers[a.worker_id].assignments:
                bad.append(f"worker {a.worker_id} lists {aid}, which is no longer authoritative")

    def _worker(self, state: State, wid: str, bad: list[str]) -> None:
        w = state.workers[wid]
        n = len(w.assignments)
        if n > w.slots:
            bad.append(f"worker {wid} holds {n} groups with {w.slots} slots")
        for aid in w.assignments:
            a = state.assignments.get(aid)
            if a is None or not a.authoritative or a.worker_id != wid:
                bad.append(f"worker {wid} lists assignments it does not hold")
        free = w.free  # quarantined and degraded workers are off the list too (the checker had missed both)
        if free != (wid in state.free_workers):
            bad.append(f"worker {wid} free-list membership is wrong")
        slots = w.slots if w.status == WorkerStatus.ACTIVE else 0
        old_slots, old_free = self.worker_view.get(wid, (0, False))
        self.slots_active += slots - old_slots
        self.free += free - old_free
        self.worker_view[wid] = (slots, free)
        self.held[wid] = dict(w.assignments)

    def _group(self, state: State, run_id: str, index: int, bad: list[str]) -> None:
        run = state.runs[run_id]
        mirror = self.runs[run_id]
        group = run.groups[index]
        status = int(group.status)
        old = mirror.status[index]
        if old != status:
            mirror.counts[old] -= 1
            mirror.counts[status] += 1
            mirror.status[index] = status
        pending = 0
        for cid in group.cells:
            cell = run.cells[cid]
            limit = run.max_attempts(cell)
            # Throttled attempts and those a quarantined worker burned (forgiven) do not count.
            counted = counted_attempts(cell)
            if counted > limit:
                bad.append(f"cell {cid} has {counted} counted attempts over its limit {limit}")
            last = 0
            for tid in cell.attempts:
                order = state.attempts[tid].dispatch_order
                if order <= last:
                    bad.append(f"cell {cid} attempts are not in dispatch order")
                last = order
            key = (run_id, cid)
            before = self.selected.get(key)
            if cell.selected is not None:
                t = state.attempts[cell.selected]
                if t.cell_id != cid or (r := t.report) is None or not is_selectable(r) or t.late:
                    bad.append(f"cell {cid} selected {cell.selected} without selectable authoritative evidence")
                if before is None:
                    self.selected[key] = cell.selected
                    mirror.selected += 1
                    pin = self.attempt_pin.get(cell.selected)
                    if pin is None:
                        bad.append(f"cell {cid} selected {cell.selected}, which was never seen dispatched")
                    else:
                        if mirror.selected_pin < 0:
                            mirror.selected_pin = pin
                        if pin != mirror.selected_pin or self.pins[pin] != run.pin:
                            bad.append(f"run {run_id} selected results dispatched under 2 environments ({cid})")
                elif before != cell.selected:
                    self.selection_changes += 1
                    bad.append(f"cell {cid} selection changed from {before} to {cell.selected}")
            elif before is not None:
                bad.append(f"cell {cid} lost its selected result {before}")
            elif counted < limit and cell.throttled < run.max_throttled(cell):
                pending += 1
        bad.extend(group_status_problems(group, pending))
        if group.status == GroupStatus.ASSIGNED and self.owner.get((run_id, index)) != group.assignment:
            bad.append(f"group {group.group_id} is assigned to {group.assignment}, not its known owner")
        owner = state.assignments.get(group.assignment) if group.status == GroupStatus.ASSIGNED else None
        if owner is not None and not runs_unanswered(state, owner):
            bad.append(f"{group.assignment} still runs, but every cell it runs has a selected result")

    def _counters(self, state: State, bad: list[str]) -> None:
        if state.slots_active != self.slots_active:
            bad.append(f"slots_active {state.slots_active} != {self.slots_active}")
        if len(state.free_workers) != self.free:
            bad.append(f"{len(state.free_workers)} workers on the free list, {self.free} free")
        if len(state.attempts) != len(self.attempt_cell):
            bad.append(f"{len(state.attempts)} attempts recorded, {len(self.attempt_cell)} dispatched")
        if len(state.assignments) != self.assignments_made:
            bad.append(f"{len(state.assignments)} assignments recorded, {self.assignments_made} pushed")
        for run_id, m in self.runs.items():
            run = state.runs[run_id]
            if run.active != m.active or m.counts[_ASSIGNED] != m.active:
                bad.append(f"run {run_id} counts {run.active} active, has {m.active} "
                           f"({m.counts[_ASSIGNED]} groups assigned)")
            if run.active > m.cap:
                bad.append(f"run {run_id} has {run.active} groups running over its cap {m.cap}")
            if run.settled_groups != m.counts[_SETTLED]:
                bad.append(f"run {run_id} counts {run.settled_groups} settled groups, has {m.counts[_SETTLED]}")
            if run.selected_cells != m.selected:
                bad.append(f"run {run_id} counts {run.selected_cells} selected cells, has {m.selected}")
            if len(run.ready) + len(run.backoff) != m.counts[_WAITING]:
                bad.append(f"run {run_id} queues {len(run.ready) + len(run.backoff)} groups, "
                           f"{m.counts[_WAITING]} wait")
            if m.selected and run.pin is None:
                bad.append(f"run {run_id} has selected results but no pin")

    # --- the whole state -----------------------------------------------------------------------
    def checkpoint(self, state: State) -> list[str]:
        """Every invariant over the whole state, and the whole mirror against it: O(state)."""
        self.checkpoints += 1
        bad = check(state)
        if len(state.attempts) != len(self.attempt_cell):
            bad.append(f"{len(state.attempts)} attempts recorded, {len(self.attempt_cell)} dispatched")
        for tid, t in state.attempts.items():
            if self.attempt_cell.get(tid) != t.cell_id:
                bad.append(f"attempt {tid} of {t.cell_id} was never seen dispatched (or reused)")
                break
        owners = {}
        for aid, a in state.assignments.items():
            if a.authoritative:
                owners[(a.run_id, a.group_index)] = aid
        if owners != self.owner:
            bad.append(f"{len(owners)} authoritative assignments, the mirror knows {len(self.owner)}")
        for run_id, run in state.runs.items():
            m = self.runs.get(run_id)
            if m is None:
                bad.append(f"run {run_id} was never seen submitted")
                continue
            if bytes(m.status) != bytes(int(g.status) for g in run.groups):
                bad.append(f"run {run_id}: the groups' statuses differ from what the commands showed")
            for cid, cell in run.cells.items():
                if self.selected.get((run_id, cid)) != cell.selected:
                    bad.append(f"cell {cid} selected {cell.selected}, the mirror {self.selected.get((run_id, cid))}")
                    break
                if cell.selected is not None and self.pins[self.attempt_pin.get(cell.selected, -1)] != run.pin:
                    bad.append(f"run {run_id} selected {cell.selected} dispatched under another pin")
                    break
        for wid, w in state.workers.items():
            slots = w.slots if w.status == WorkerStatus.ACTIVE else 0
            free = wid in state.free_workers
            if self.worker_view.get(wid) != (slots, free) or self.held.get(wid, {}) != w.assignments:
                bad.append(f"worker {wid} differs from what the commands showed")
                break
        self._counters(state, bad)
        return bad


# --- model providers -----------------------------------------------------------------------------

def _retry_after_ms(report: object) -> int:
    """The wait a throttled report asks for, computed here from the limits (not with the core's
    function): a core that ignored the retry-after must not pass by agreeing with itself."""
    wait = getattr(report, "retry_after_ms", 0)
    return min(wait, limits.RETRY_AFTER_MS_MAX) if wait > 0 else limits.THROTTLE_RETRY_AFTER_MS_DEFAULT


def provider_step_problems(state: State, new_attempts: list[AttemptState]) -> list[str]:
    """The providers' contract after one step, recounted from the attempts (the simulation's
    providers scenario calls this after every durable command, next to the core's `Monitor`,
    whose `check` and `dispatch_problems` trust the core's own counters):

    - every provider that got cells in this step runs (by a walk of the unreported cells of
      authoritative assignments) at most its effective limit, or only the cells of this step;
    - a selected attempt was never throttled;
    - a cell's throttled count is its authoritative throttled reports, recounted; its counted
      attempts (all, less the throttled and the forgiven) stay within maxAttemptsPerCell and its throttled ones
      within maxThrottledAttemptsPerCell;
    - an attempt that follows a throttled one of its cell was dispatched no sooner than that
      report's time plus its retry-after.

    An attempt a restore rebuilt from a worker's offer (issued before the restore) is no dispatch
    of this step: it is left out of the first and the last.
    """
    bad: list[str] = []
    walk = running_by_provider(state)
    started: dict[str, int] = {}
    for t in new_attempts:
        run = state.runs[t.run_id]
        cell = run.cells[t.cell_id]
        if t.recovered:  # issued before a restore, only offered now: it started nothing, and its
            continue     # place in the cell's list is its offer's, after attempts dispatched since
        if run.subject_providers:
            name = run.subject_providers[run.groups[cell.group_index].cells.index(t.cell_id)]
            started[name] = started.get(name, 0) + 1
        i = cell.attempts.index(t.attempt_id)
        if i:
            before = state.attempts[cell.attempts[i - 1]]
            if (report := before.report) is not None and report.throttled and not before.late:
                ready_ms = before.reported_ms + _retry_after_ms(report)
                if t.dispatched_ms < ready_ms:
                    bad.append(f"attempt {t.attempt_id} dispatched at {t.dispatched_ms}ms, before its cell's "
                               f"throttled attempt's retry-after ended at {ready_ms}ms")
    for name, n in started.items():
        p = state.providers[name]
        if p.effective and walk.get(name, 0) > p.effective and walk.get(name, 0) != n:
            bad.append(f"provider {name} runs {walk.get(name, 0)} cells (by a walk) over its effective "
                       f"limit {p.effective} after dispatching {n}")
    for run in state.runs.values():
        if not run.subject_providers:
            continue
        for cid, cell in run.cells.items():
            throttled = 0
            for tid in cell.attempts:
                t = state.attempts[tid]
                if (r := t.report) is not None and r.throttled and not t.late:
                    throttled += 1
            if throttled != cell.throttled:
                bad.append(f"cell {cid} counts {cell.throttled} throttled attempts, its reports say {throttled}")
            # Counted: all, less the throttled (recounted above) and the forgiven (attempts of a
            # quarantined worker's streak, given back: coordinator.core.state.counted_attempts).
            counted = len(cell.attempts) - throttled - cell.forgiven
            if counted > run.max_attempts(cell):
                bad.append(f"cell {cid} has {counted} counted attempts over "
                           f"its limit {run.max_attempts(cell)}")
            if throttled > run.max_throttled(cell):
                bad.append(f"cell {cid} has {throttled} throttled attempts over its bound "
                           f"{run.max_throttled(cell)}")
            if cell.selected is not None:
                report = state.attempts[cell.selected].report
                if report is None or report.throttled:
                    bad.append(f"cell {cid} selected {cell.selected}, a throttled attempt")
    return bad
