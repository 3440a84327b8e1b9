"""Execution adapters: run one cell attempt and return its evidence (see base.py)."""
from worker.executor.base import CellJob, CellOutcome, Executor, LocalArtifact, executor_for

__all__ = ["CellJob", "CellOutcome", "Executor", "LocalArtifact", "executor_for"]
