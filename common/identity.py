"""The language-neutral part of a worker's environment identity.

A worker's `environment_id` digests its whole measured manifest, its own implementation
included (interpreter, fleet source): two workers agree on it only when they run the same
build. A run whose policy says `environmentMatch: "cell"` instead compares the *cell
environment*: the components that decide what a subject and its verifier see, measured
the same way by every implementation (protos/fleet/v1/coordinator.proto, Hello):

- `bench.tree`: sha256 over the bench root's files (see worker/identity.py tree_digest);
- `platform.*`: the operating system and machine;
- `tool:*`, `image.*`, `harbor.*`: resolved tools, image digests, the Harbor version.

`cell_environment_id` = "cenv-" + the first 16 hex of sha256 over the canonical JSON (keys
sorted, no spaces) of exactly those components.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping

from common.spec import canonical_json

CELL_ENVIRONMENT_PREFIXES = ("bench.tree", "platform.", "tool:", "image.", "harbor.")
CELL_ENVIRONMENT_ID_HEX_CHARS = 16


def cell_environment(manifest: Mapping[str, str]) -> dict[str, str]:
    return {k: manifest[k] for k in sorted(manifest) if k.startswith(CELL_ENVIRONMENT_PREFIXES)}


def cell_environment_id(manifest: Mapping[str, str]) -> str:
    digest = hashlib.sha256(canonical_json(cell_environment(manifest)).encode()).hexdigest()
    return "cenv-" + digest[:CELL_ENVIRONMENT_ID_HEX_CHARS]
