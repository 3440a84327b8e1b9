"""Execution adapters: run one cell attempt and return its evidence (see base.py); registry.py
picks the adapter of a spec's executor kind."""
from worker.executor.base import CellJob, CellOutcome, Executor, LocalArtifact
from worker.executor.registry import executor_for

__all__ = ["CellJob", "CellOutcome", "Executor", "LocalArtifact", "executor_for"]
