"""Honest statistics over a run's results: per-subject means with intervals clustered by task,
pass rates, and paired differences between subjects over the same task x repetition.

Rules.
- Only selected cells are samples; incomplete cells are listed with their reasons and never
  counted as zero. Repetitions of one task are not independent samples: every interval treats
  the task as the unit (a cluster). With fewer than two tasks there is no interval (None), not
  a made-up one.
- An interval never leaves the range the score can take: the spec's `benchmark.scoreRange`
  for a mean score (a paired difference lies in [low - high, high - low]), [0, 1] for a pass
  rate, by definition. Each Estimate names its method (`method`, and `range` in the JSON):
  * `t_clustered`: the mean, a cluster-robust standard error by task (CR1, with the G/(G-1)
    small-sample factor) and Student's t with G-1 degrees of freedom, G the number of tasks.
    With a declared range, `t_clustered_clipped`: the same interval cut to the range (the
    t interval ignores bounds, so near a bound it is cut rather than trusted beyond it).
  * `wilson_clustered`: for a pass rate, the Wilson score interval (which stays inside
    [0, 1] by construction) computed with the effective sample size n_eff = p(1-p)/V, V the
    cluster-robust variance of the mean, held inside [G, n] (repetitions of one task carry at
    least one task's and at most their own count's information; with p at 0 or 1 V is 0 and
    n_eff is G, the cautious end), and t with G-1 degrees of freedom as its critical value.
  * `cluster_bootstrap`: the expanded-percentile interval of a seeded bootstrap that resamples
    whole tasks with replacement (`BOOTSTRAP_RESAMPLES`, seed `BOOTSTRAP_SEED` and the
    estimate's label, so the same results always print the same interval; the percentiles are
    widened for G tasks as in `cluster_bootstrap`). Resampled means of in-range scores are in
    range, so it needs no clipping. `fleetctl results RUN --ci bootstrap`.
- With few tasks (under about 30) the t interval undercovers when scores are skewed; the
  bootstrap does not fix that, but when the two disagree by more than `DISAGREE_FRACTION` of
  the range (or, with no range, of the t interval's width) at either end, both are shown.
  tests/property/test_intervals.py measures the coverage of each method on simulated
  clustered data with a known mean.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

PASS_THRESHOLD = 1.0  # a cell "passes" when its score reaches this (full marks)
Z_975 = 1.959963984540054
PASS_RATE_RANGE = (0.0, 1.0)
CI_METHODS = ("t", "bootstrap")
# 2,000 resamples put the Monte Carlo error of a 2.5% percentile near 0.35 percentage points
# of coverage, below the precision any reader takes from a 3-digit interval.
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = "fleet-cluster-bootstrap-v1"
# Two intervals "disagree" when an end moves by more than a tenth of the range: visible on
# a [0, 1] score as a change in the first digit.
DISAGREE_FRACTION = 0.1


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
    method: str = "t_clustered"
    bounds: tuple[float, float] | None = None  # the range the interval was kept inside

    def as_dict(self) -> dict:
        return {"n": self.n, "tasks": self.clusters, "mean": self.mean, "ci95": None if self.low is None else
                [self.low, self.high], "method": self.method,
                "range": None if self.bounds is None else list(self.bounds)}


Samples = list[tuple[str, float]]


def _clusters(samples: Samples) -> dict[str, tuple[float, int]]:
    out: dict[str, tuple[float, int]] = {}
    for cluster, value in samples:
        total, count = out.get(cluster, (0.0, 0))
        out[cluster] = (total + value, count + 1)
    return out


def _cr1_variance(samples: Samples, mean: float, g: int) -> float:
    sums: dict[str, float] = {}
    for cluster, value in samples:
        sums[cluster] = sums.get(cluster, 0.0) + (value - mean)
    n = len(samples)
    return sum(s * s for s in sums.values()) / (n * n) * g / (g - 1)


def clustered_mean(samples: Samples, bounds: tuple[float, float] | None = None) -> Estimate:
    """Mean of (cluster, value) samples with a cluster-robust t 95% interval, cut to `bounds`."""
    method = "t_clustered" if bounds is None else "t_clustered_clipped"
    n = len(samples)
    if n == 0:
        return Estimate(0, 0, None, None, None, method, bounds)
    mean = sum(v for _, v in samples) / n
    g = len(_clusters(samples))
    if g < 2:
        return Estimate(n, g, mean, None, None, method, bounds)
    half = t_quantile_975(g - 1) * math.sqrt(_cr1_variance(samples, mean, g))
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = min(max(bounds[0], low), bounds[1]), max(min(bounds[1], high), bounds[0])
    return Estimate(n, g, mean, low, high, method, bounds)


def wilson_clustered(samples: Samples) -> Estimate:
    """A pass rate (values 0 or 1) with a Wilson interval on the clustered effective sample size."""
    n = len(samples)
    if n == 0:
        return Estimate(0, 0, None, None, None, "wilson_clustered", PASS_RATE_RANGE)
    p = sum(v for _, v in samples) / n
    g = len(_clusters(samples))
    if g < 2:
        return Estimate(n, g, p, None, None, "wilson_clustered", PASS_RATE_RANGE)
    variance = _cr1_variance(samples, p, g)
    n_eff = float(g) if variance <= 0 else min(float(n), max(float(g), p * (1 - p) / variance))
    c = t_quantile_975(g - 1)
    c2n = c * c / n_eff
    center = (p + c2n / 2) / (1 + c2n)
    half = c / (1 + c2n) * math.sqrt(p * (1 - p) / n_eff + c2n / (4 * n_eff))
    return Estimate(n, g, p, max(0.0, center - half), min(1.0, center + half), "wilson_clustered", PASS_RATE_RANGE)


def cluster_bootstrap(samples: Samples, label: str, bounds: tuple[float, float] | None = None,
                      resamples: int = BOOTSTRAP_RESAMPLES, seed: str = BOOTSTRAP_SEED) -> Estimate:
    """Percentile interval of the mean over `resamples` resamplings of whole clusters, seeded by
    `seed` and `label` (the estimate's name), so that it is the same on every call."""
    n = len(samples)
    if n == 0:
        return Estimate(0, 0, None, None, None, "cluster_bootstrap", bounds)
    mean = sum(v for _, v in samples) / n
    clusters = list(_clusters(samples).values())
    g = len(clusters)
    if g < 2:
        return Estimate(n, g, mean, None, None, "cluster_bootstrap", bounds)
    rng = random.Random(f"{seed}:{label}")
    means = []
    for _ in range(resamples):
        total, count = 0.0, 0
        for _ in range(g):
            t, c = clusters[rng.randrange(g)]
            total += t
            count += c
        means.append(total / count)
    means.sort()
    # Expanded percentiles (Hesterberg 2015, "What teachers should know about the bootstrap",
    # section 5.3): the plain percentile interval is too narrow by the factor sqrt((G-1)/G) and
    # by z against t with G-1 degrees of freedom; widening the tail probability to
    # Phi(-sqrt(G/(G-1)) t_{G-1}) corrects both and still returns resampled means, in range.
    tail = 0.5 * math.erfc(math.sqrt(g / (g - 1)) * t_quantile_975(g - 1) / math.sqrt(2))
    low = means[min(resamples - 1, int(tail * resamples))]
    high = means[max(0, math.ceil((1 - tail) * resamples) - 1)]
    return Estimate(n, g, mean, low, high, "cluster_bootstrap", bounds)


def disagree(a: Estimate, b: Estimate) -> bool:
    """Whether two intervals of one quantity differ at either end by more than
    DISAGREE_FRACTION of the range (or, with no range, of the first interval's width)."""
    if a.low is None or b.low is None:
        return False
    bounds = a.bounds or b.bounds
    scale = (bounds[1] - bounds[0]) if bounds is not None else (a.high - a.low)
    margin = DISAGREE_FRACTION * scale
    return abs(a.low - b.low) > margin or abs(a.high - b.high) > margin


@dataclass(frozen=True, slots=True)
class SubjectStats:
    subject: str
    selected: int
    incomplete: int
    score: Estimate
    pass_rate: Estimate
    score_bootstrap: Estimate | None = None
    pass_rate_bootstrap: Estimate | None = None

    def as_dict(self) -> dict:
        out = {"subject": self.subject, "selected": self.selected, "incomplete": self.incomplete,
               "score": self.score.as_dict(), "pass_rate": self.pass_rate.as_dict()}
        if self.score_bootstrap is not None and self.pass_rate_bootstrap is not None:
            out["score_bootstrap"] = self.score_bootstrap.as_dict()
            out["pass_rate_bootstrap"] = self.pass_rate_bootstrap.as_dict()
            out["disagree"] = {"score": disagree(self.score, self.score_bootstrap),
                               "pass_rate": disagree(self.pass_rate, self.pass_rate_bootstrap)}
        return out


@dataclass(frozen=True, slots=True)
class PairedDifference:
    a: str
    b: str
    difference: Estimate  # mean of a - b over the task x repetition pairs where both are selected
    bootstrap: Estimate | None = None

    def as_dict(self) -> dict:
        out = {"a": self.a, "b": self.b, "pairs": self.difference.n, "difference": self.difference.as_dict()}
        if self.bootstrap is not None:
            out["difference_bootstrap"] = self.bootstrap.as_dict()
            out["disagree"] = disagree(self.difference, self.bootstrap)
        return out


def _range(score_range: tuple[float, float] | list[float] | None) -> tuple[float, float] | None:
    return None if score_range is None else (float(score_range[0]), float(score_range[1]))


def subject_stats(cells: list[dict], score_range: tuple[float, float] | list[float] | None = None,
                  bootstrap: bool = False) -> list[SubjectStats]:
    """`cells` as in `fleetctl results --json`: subject, task, state, score; `score_range` the
    spec's benchmark.scoreRange (the JSON's summary.score_range); `bootstrap` adds the
    cluster-bootstrap intervals."""
    bounds = _range(score_range)
    subjects: dict[str, list[dict]] = {}
    for cell in cells:
        subjects.setdefault(cell["subject"], []).append(cell)
    return [_subject_stats(subject, [(c["task"], float(c["score"])) for c in rows if c["state"] == "selected"],
                           sum(1 for c in rows if c["state"] != "selected"), bounds, bootstrap)
            for subject, rows in subjects.items()]


def _subject_stats(subject: str, chosen: Samples, incomplete: int, bounds: tuple[float, float] | None,
                   bootstrap: bool) -> SubjectStats:
    passed = [(t, 1.0 if s >= PASS_THRESHOLD else 0.0) for t, s in chosen]
    return SubjectStats(
        subject, len(chosen), incomplete, clustered_mean(chosen, bounds), wilson_clustered(passed),
        cluster_bootstrap(chosen, f"{subject}:score", bounds) if bootstrap else None,
        cluster_bootstrap(passed, f"{subject}:pass_rate", PASS_RATE_RANGE) if bootstrap else None)


def _diff_bounds(bounds: tuple[float, float] | None) -> tuple[float, float] | None:
    return None if bounds is None else (bounds[0] - bounds[1], bounds[1] - bounds[0])


def paired_differences(cells: list[dict], score_range: tuple[float, float] | list[float] | None = None,
                       bootstrap: bool = False) -> list[PairedDifference]:
    diff_bounds = _diff_bounds(_range(score_range))
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
            out.append(PairedDifference(a, b, clustered_mean(pairs, diff_bounds),
                                        cluster_bootstrap(pairs, f"{a}-{b}", diff_bounds) if bootstrap else None))
    return out


METHOD_TEXT = {
    "t_clustered": "Student t over tasks (cluster-robust)",
    "t_clustered_clipped": "Student t over tasks (cluster-robust), clipped to the score range",
    "wilson_clustered": "Wilson on the clustered effective sample size",
    "cluster_bootstrap": f"seeded cluster bootstrap over tasks ({BOOTSTRAP_RESAMPLES} resamples, expanded percentile)",
}


def describe(e: Estimate) -> str:
    """The method in words, with the range it keeps to: for the text output."""
    text = METHOD_TEXT[e.method]
    if e.bounds is None or e.method == "wilson_clustered":
        return text
    return text + (" " if e.method == "t_clustered_clipped" else ", within ") + f"[{e.bounds[0]:g}, {e.bounds[1]:g}]"


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


class StreamingStats:
    """`subject_stats` and `paired_differences` (the same numbers) over cells that arrive page
    by page in the run's order, a group's subjects together: what is kept is a task id and a
    score per selected cell and per pair, not the cells' records."""

    def __init__(self, score_range: tuple[float, float] | list[float] | None, bootstrap: bool = False) -> None:
        self._bounds, self._bootstrap = _range(score_range), bootstrap
        self._chosen: dict[str, Samples] = {}
        self._incomplete: dict[str, int] = {}
        self._pairs: dict[tuple[str, str], Samples] = {}
        self._key: tuple[str, int] | None = None
        self._scores: dict[str, float] = {}
        self.outside: list[dict] = []  # cell_id and score of selected cells outside the declared range

    def add(self, cell: dict) -> None:
        subject = cell["subject"]
        if subject not in self._chosen:
            self._chosen[subject], self._incomplete[subject] = [], 0
        key = (cell["task"], cell["repetition"])
        if key != self._key:
            self._flush()
            self._key = key
        if cell["state"] != "selected":
            self._incomplete[subject] += 1
            return
        score = float(cell["score"])
        self._chosen[subject].append((cell["task"], score))
        self._scores[subject] = score
        if self._bounds is not None and not self._bounds[0] <= score <= self._bounds[1]:
            self.outside.append({"cell_id": cell["cell_id"], "score": score})

    def _flush(self) -> None:
        if self._key is not None and len(self._scores) > 1:
            names = list(self._chosen)
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    if a in self._scores and b in self._scores:
                        self._pairs.setdefault((a, b), []).append((self._key[0], self._scores[a] - self._scores[b]))
        self._scores = {}

    def subjects(self) -> list[SubjectStats]:
        self._flush()
        return [_subject_stats(name, chosen, self._incomplete[name], self._bounds, self._bootstrap)
                for name, chosen in self._chosen.items()]

    def paired_differences(self) -> list[PairedDifference]:
        self._flush()
        names, bounds = list(self._chosen), _diff_bounds(self._bounds)
        out = []
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                pairs = self._pairs.get((a, b), [])
                out.append(PairedDifference(a, b, clustered_mean(pairs, bounds),
                                            cluster_bootstrap(pairs, f"{a}-{b}", bounds) if self._bootstrap else None))
        return out
