"""The language-neutral part of a worker's environment identity.

A run's environment has two parts (README, "How identity is computed"):

- the reference: what the run uses from the bench root (`bench.file:*`, `bench.taskdir:*`,
  `python.module:*`, `harbor.task:*`), measured by the submitter at submit and frozen with
  the run; a worker serves the run only when its own measurement of those keys is equal;
- the pin: what only a worker can measure (its interpreter, platform, fleet's source,
  Harbor's version: the Hello's spec-independent components, and the tools the spec names,
  `tool:*`), fixed at the run's first dispatch so environments never mix in one run.

A worker's `environment_id` digests its Hello manifest. A run whose policy says
`environmentMatch: "cell"` pins only the *cell environment*: the components that decide
what a subject and its verifier see, measured the same way by every implementation
(`platform.*`, `tool:*`, `image.*`, `harbor.*`), so workers in several languages can serve
one run. `cell_environment_id` = "cenv-" + the first 16 hex of sha256 over the canonical
JSON (keys sorted, no spaces) of exactly those components.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from common.spec import canonical_json

CELL_ENVIRONMENT_PREFIXES = ("platform.", "tool:", "image.", "harbor.")
# Keys of a run's manifest that only a worker measures: they join the pin, not the reference.
WORKER_KEY_PREFIXES = ("tool:",)
# The key kinds a worker measures from its bench root when offered a run.
REFERENCE_KEY_PREFIXES = ("bench.file:", "bench.taskdir:", "python.module:", "harbor.task:", "executor.kind")
CELL_ENVIRONMENT_ID_HEX_CHARS = 16


# Hello components shown to operators but not pinned: a commit that changes no code a worker
# runs (a README, a coordinator fix) moves the revision, while `fleet.source` digests the code
# itself; pinning the revision refused identical builds started from two commits.
PIN_IGNORED_KEYS = ("fleet.revision",)
# The value of a key a side did not measure, in differences and pins.
NOT_MEASURED = "(not measured)"


def pin_components(environment: Iterable[tuple[str, str]], environment_match: str,
                   measured: Mapping[str, str], worker_keys: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """What a run pins of a worker at its first dispatch (and compares with every later
    worker): its Hello environment (only the cell-environment part when the run's policy says
    environmentMatch "cell"), and the run's keys only workers measure. The coordinator's core
    and `fleet-worker identity --against` both use this one rule."""
    env = tuple(kv for kv in environment if kv[0] not in PIN_IGNORED_KEYS)
    if environment_match == "cell":
        env = tuple(kv for kv in env if kv[0].startswith(CELL_ENVIRONMENT_PREFIXES))
    extra = tuple((k, measured.get(k, NOT_MEASURED)) for k in worker_keys)
    return tuple(sorted(env + extra))


def differences(want: Iterable[tuple[str, str]] | Mapping[str, str], got: Iterable[tuple[str, str]] | Mapping[str, str],
                *, every_key: bool = False) -> tuple[tuple[str, str, str], ...]:
    """(key, wanted, got) for each wanted key whose value differs, sorted by key; with
    `every_key`, also for keys only `got` has (a pin compares whole environments)."""
    w = dict(want.items() if isinstance(want, Mapping) else want)
    g = dict(got.items() if isinstance(got, Mapping) else got)
    keys = sorted(dict.fromkeys([*w, *g])) if every_key else sorted(w)
    return tuple((k, w.get(k, NOT_MEASURED), g.get(k, NOT_MEASURED)) for k in keys if w.get(k) != g.get(k))


def manifest_id(manifest: Mapping[str, str]) -> str:
    """"env-" + 16 hex of sha256 over a manifest's canonical JSON: how operators name one."""
    return "env-" + hashlib.sha256(canonical_json(dict(manifest)).encode()).hexdigest()[:CELL_ENVIRONMENT_ID_HEX_CHARS]


def cell_environment(manifest: Mapping[str, str]) -> dict[str, str]:
    return {k: manifest[k] for k in sorted(manifest) if k.startswith(CELL_ENVIRONMENT_PREFIXES)}


def cell_environment_id(manifest: Mapping[str, str]) -> str:
    digest = hashlib.sha256(canonical_json(cell_environment(manifest)).encode()).hexdigest()
    return "cenv-" + digest[:CELL_ENVIRONMENT_ID_HEX_CHARS]
