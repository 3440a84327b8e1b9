"""The pure core: `step(state, command) -> (state, Transition)`. See machine.py for the rules."""
from coordinator.core.machine import is_soft, new_state, push_for, step
from coordinator.core.state import State, durable_fingerprint
from coordinator.core.summary import RunSummary, summarize

__all__ = ["State", "RunSummary", "durable_fingerprint", "is_soft", "new_state", "push_for", "step", "summarize"]
