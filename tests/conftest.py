"""Settings for the whole suite. Hypothesis runs without its per-example deadline (200 ms by
default): a test fails on what it checks, never on how long an example took, since this suite
runs on shared, noisy machines, two test processes at once (a log-codec round trip failed on
its deadline while CI ran beside it)."""
from __future__ import annotations

from hypothesis import settings

settings.register_profile("fleet", deadline=None)
settings.load_profile("fleet")
