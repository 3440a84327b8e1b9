"""The intervals of common/report/stats.py keep their promises: they never leave the declared
range (Hypothesis over arbitrary clustered samples), and on simulated clustered data with a
known mean each method covers that mean within Monte Carlo error of 95% where it claims to
(30 tasks x 3 repetitions, seeded `random`, a few seconds in all)."""
from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from common.report.stats import (
    PASS_RATE_RANGE,
    Estimate,
    cluster_bootstrap,
    clustered_mean,
    disagree,
    subject_stats,
    wilson_clustered,
)

TASKS = 30
REPETITIONS = 3
REPLICATES = 400
# 95% +- 3 standard errors of a binomial proportion over REPLICATES trials (about 3.3 points):
# a correct method fails this about once in 370 seeds, and the seeds are fixed.
TOLERANCE = 3 * math.sqrt(0.95 * 0.05 / REPLICATES)
TRUE_MEAN = 0.65  # task means are uniform on [0.3, 1.0]


def simulate(rng: random.Random, binary: bool) -> list[tuple[str, float]]:
    """One run: each task has its own mean (so repetitions of a task are correlated); a cell's
    score is Beta-distributed around it (or passes with that probability), so every score is
    in [0, 1] and the expected mean over cells is TRUE_MEAN."""
    samples = []
    for g in range(TASKS):
        mu = rng.uniform(0.3, 1.0)
        for _ in range(REPETITIONS):
            if binary:
                samples.append((f"t{g}", 1.0 if rng.random() < mu else 0.0))
            else:
                samples.append((f"t{g}", min(1.0, rng.betavariate(mu * 4, (1 - mu) * 4 + 1e-9))))
    return samples


def coverage(method, binary: bool, seed: int) -> float:
    rng = random.Random(seed)
    hits = 0
    for i in range(REPLICATES):
        e = method(simulate(rng, binary), i)
        assert e.low is not None and 0.0 <= e.low <= e.mean <= e.high <= 1.0, e
        hits += e.low <= TRUE_MEAN <= e.high
    return hits / REPLICATES


def test_clipped_t_interval_covers_the_mean_of_a_score_at_95_percent():
    c = coverage(lambda s, i: clustered_mean(s, (0.0, 1.0)), binary=False, seed=1)
    assert abs(c - 0.95) <= TOLERANCE, c


def test_wilson_clustered_covers_a_pass_rate_at_95_percent():
    c = coverage(lambda s, i: wilson_clustered(s), binary=True, seed=2)
    assert abs(c - 0.95) <= TOLERANCE, c


def test_cluster_bootstrap_covers_the_mean_of_a_score_at_95_percent():
    c = coverage(lambda s, i: cluster_bootstrap(s, f"r{i}", (0.0, 1.0), resamples=400), binary=False, seed=3)
    assert abs(c - 0.95) <= TOLERANCE, c


cluster_samples = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", "e"]), st.floats(-3.0, 7.0)),
                           min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(cluster_samples)
def test_no_interval_leaves_the_declared_range(samples):
    bounds = (-3.0, 7.0)
    passed = [(c, 1.0 if v >= 6.0 else 0.0) for c, v in samples]
    for e in (clustered_mean(samples, bounds), cluster_bootstrap(samples, "x", bounds, resamples=50),
              wilson_clustered(passed), cluster_bootstrap(passed, "y", PASS_RATE_RANGE, resamples=50)):
        if e.low is not None:
            lo, hi = e.bounds
            assert lo <= e.low <= e.high <= hi, e


def test_bootstrap_is_seeded_and_disagreement_is_flagged():
    # The README's example: ten tasks, one of which always fails (the `flaky` subject's 0.900).
    cells = [{"subject": "s", "task": f"t{g}", "repetition": r, "state": "selected", "score": 1.0 if g else 0.0}
             for g in range(10) for r in (1, 2)]
    first = subject_stats(cells, [0, 1], bootstrap=True)[0]
    assert first.score_bootstrap == subject_stats(cells, [0, 1], bootstrap=True)[0].score_bootstrap
    assert (round(first.score.low, 3), first.score.high) == (0.674, 1.0), "t [0.674, 1.126], clipped"
    # A resampled mean is a count of passing tasks over ten: the bootstrap's ends are on that grid.
    assert first.score_bootstrap.low in (0.6, 0.7) and first.score_bootstrap.high == 1.0
    d = first.as_dict()
    assert d["score"]["method"] == "t_clustered_clipped" and d["score"]["range"] == [0.0, 1.0]
    assert d["score_bootstrap"]["method"] == "cluster_bootstrap" and d["pass_rate"]["method"] == "wilson_clustered"
    assert d["disagree"]["score"] == disagree(first.score, first.score_bootstrap)
    # The margin: a tenth of the range at either end.
    a = Estimate(10, 10, 0.5, 0.30, 0.70, "t_clustered_clipped", (0.0, 1.0))
    assert not disagree(a, Estimate(10, 10, 0.5, 0.21, 0.79, "cluster_bootstrap", (0.0, 1.0)))
    assert disagree(a, Estimate(10, 10, 0.5, 0.19, 0.70, "cluster_bootstrap", (0.0, 1.0)))
    assert disagree(a, Estimate(10, 10, 0.5, 0.30, 0.81, "cluster_bootstrap", (0.0, 1.0)))


def coverage_table(replicates: int = 3000, boot_replicates: int = 1000) -> None:
    """`.venv/bin/python -m tests.property.test_intervals`: the coverage of each method at 30,
    10 and 5 tasks (the figures quoted in the README), larger than the CI-sized tests."""
    global REPLICATES, TASKS
    for tasks in (30, 10, 5):
        TASKS, REPLICATES = tasks, replicates
        t = coverage(lambda s, i: clustered_mean(s, (0.0, 1.0)), binary=False, seed=11)
        w = coverage(lambda s, i: wilson_clustered(s), binary=True, seed=12)
        REPLICATES = boot_replicates
        b = coverage(lambda s, i: cluster_bootstrap(s, f"r{i}", (0.0, 1.0), resamples=400), binary=False, seed=13)
        print(f"{tasks} tasks x {REPETITIONS}: t clipped {t:.3f} ({replicates} runs), wilson clustered {w:.3f} "
              f"({replicates} runs), cluster bootstrap {b:.3f} ({boot_replicates} runs)")


if __name__ == "__main__":
    coverage_table()
