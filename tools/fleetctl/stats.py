"""Honest statistics over a run's results: per-subject means with intervals clustered by task,
pass rates, and paired differences between subjects over the same task x repetition.

Rules. Only selected cells are samples; incomplete cells are listed with their reasons and
never counted as zero. Repetitions of one task are not independent samples, so standard
errors are cluster-robust by task (CR1, with the G/(G-1) small-sample factor) and intervals
use Student's t with G-1 degrees of freedom, G the number of tasks. With fewer than two
tasks there is no interval (None), not a made-up one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

PASS_THRESHOLD = 1.0  # a cell "passes" when its score reaches this (full marks)
Z_975 = 1.959963984540054


def t_quantile_975(df: int) -> float:
    """Student's t 97.5% quantile: exact table to 30 degrees of freedom, then the
    Cornish-Fisher expansion (error below 1e-4 there)."""
    table = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
             2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
             2.052, 2.048, 2.045, 2.042]
    assert df >= 1
    if df <= len(table):
        return table[df - 1]
    z = Z_975
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


@dataclass(frozen=True, slots=True)
class Estimate:
    n: int  # samples
    clusters: int  # tasks
    mean: float | None
    low: float | None  # 95% interval, clustered by task; None with fewer than 2 tasks
    high: float | None

    def as_dict(self) -> dict:
        return {"n": self.n, "tasks": self.clusters, "mean": self.mean, "ci95": None if self.low is None else
                [self.low, self.high]}


def clustered_mean(samples: list[tuple[str, float]]) -> Estimate:
    """Mean of (cluster, value) samples with a cluster-robust 95% interval."""
    n = len(samples)
    if n == 0:
        return Estimate(0, 0, None, None, None)
    mean = sum(v for _, v in samples) / n
    sums: dict[str, float] = {}
    for cluster, value in samples:
        sums[cluster] = sums.get(cluster, 0.0) + (value - mean)
    g = len(sums)
    if g < 2:
        return Estimate(n, g, mean, None, None)
    variance = sum(s * s for s in sums.values()) / (n * n) * g / (g - 1)
    half = t_quantile_975(g - 1) * math.sqrt(variance)
    return Estimate(n, g, mean, mean - half, mean + half)


@dataclass(frozen=True, slots=True)
class SubjectStats:
    subject: str
    selected: int
    incomplete: int
    score: Estimate
    pass_rate: Estimate

    def as_dict(self) -> dict:
        return {"subject": self.subject, "selected": self.selected, "incomplete": self.incomplete,
                "score": self.score.as_dict(), "pass_rate": self.pass_rate.as_dict()}


@dataclass(frozen=True, slots=True)
class PairedDifference:
    a: str
    b: str
    difference: Estimate  # mean of a - b over the task x repetition pairs where both are selected

    def as_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "pairs": self.difference.n, "difference": self.difference.as_dict()}


def clipped(e: Estimate, lo: float, hi: float) -> Estimate:
    """A rate cannot leave [0, 1]: the t interval is cut to what is possible."""
    if e.low is None:
        return e
    return Estimate(e.n, e.clusters, e.mean, max(lo, e.low), min(hi, e.high))


def subject_stats(cells: list[dict]) -> list[SubjectStats]:
    """`cells` as in `fleetctl results --json`: subject, task, state, score."""
    subjects: dict[str, list[dict]] = {}
    for cell in cells:
        subjects.setdefault(cell["subject"], []).append(cell)
    out = []
    for subject, rows in subjects.items():
        chosen = [(c["task"], float(c["score"])) for c in rows if c["state"] == "selected"]
        out.append(SubjectStats(
            subject, len(chosen), sum(1 for c in rows if c["state"] != "selected"),
            clustered_mean(chosen),
            clipped(clustered_mean([(t, 1.0 if s >= PASS_THRESHOLD else 0.0) for t, s in chosen]), 0.0, 1.0)))
    return out


def paired_differences(cells: list[dict]) -> list[PairedDifference]:
    by_key: dict[tuple[str, int], dict[str, float]] = {}
    subjects: list[str] = []
    for cell in cells:
        if cell["subject"] not in subjects:
            subjects.append(cell["subject"])
        if cell["state"] == "selected":
            by_key.setdefault((cell["task"], cell["repetition"]), {})[cell["subject"]] = float(cell["score"])
    out = []
    for i, a in enumerate(subjects):
        for b in subjects[i + 1:]:
            pairs = [(task, scores[a] - scores[b]) for (task, _rep), scores in by_key.items()
                     if a in scores and b in scores]
            out.append(PairedDifference(a, b, clustered_mean(pairs)))
    return out


def fmt(e: Estimate, percent: bool = False) -> str:
    if e.mean is None:
        return "-"
    k = 100 if percent else 1
    unit = "%" if percent else ""
    text = f"{e.mean * k:.3g}{unit}" if percent else f"{e.mean:.3f}"
    if e.low is None:
        return text + " (one task: no interval)"
    if percent:
        return f"{text} [{e.low * k:.3g}, {e.high * k:.3g}]"
    return f"{text} [{e.low:.3f}, {e.high:.3f}]"
