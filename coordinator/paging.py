"""Page tokens of the admin listings (AIP-158): opaque to clients, bound to what they continue.

A token names the next cell of a listing by its position in the run's fixed order (group
index, then the cell's place in its group), so a run that changes between pages still lists
every cell exactly once. It also carries the tally of the cells already listed (coordinator
core `Tally`), so the summary on the last page covers exactly the cells the client received,
without any page walking the whole run.

Rules, in the order `decode` checks them:
1. A token is base64url of a fixed layout; anything else is malformed.
2. It names the coordinator process that issued it (its incarnation): a token from an earlier
   process is stale, because its key died with that process.
3. Its HMAC-SHA256 (under this process's random key, truncated to 16 bytes) must verify: a
   token edited or made up by a client is forged. Only then are its fields believed.
4. It must continue the same listing (results or attempts) of the same run.
5. It must be younger than PAGE_TOKEN_TTL_MS on the coordinator's clock.
Every refusal is a `PageTokenError` whose sentence says which rule failed; the servicer
answers it as PAGE_TOKEN_INVALID (INVALID_ARGUMENT).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
from dataclasses import dataclass

from common.limits import PAGE_TOKEN_TTL_MS
from coordinator.core.summary import Tally

TOKEN_VERSION = 1
KIND_RESULTS = 1
KIND_ATTEMPTS = 2
KIND_NAMES = {KIND_RESULTS: "GetResults", KIND_ATTEMPTS: "ListAttempts"}
MAC_BYTES = 16
RUN_DIGEST_BYTES = 8
# version, kind, incarnation, run digest, group, offset, issued_ms, then the tally:
# selected, incomplete, observed cost, selected cost, usage complete.
LAYOUT = struct.Struct(">BBQ8sIIQQQddB")


class PageTokenError(ValueError):
    """A page token refused; the message says why (see the module's rules)."""


@dataclass(frozen=True, slots=True)
class Position:
    """Where a listing continues: the next cell is run.groups[group].cells[offset]."""

    group: int = 0
    offset: int = 0


def run_digest(run_id: str) -> bytes:
    return hashlib.sha256(run_id.encode()).digest()[:RUN_DIGEST_BYTES]


class PageTokens:
    def __init__(self, key: bytes, incarnation: int) -> None:
        assert len(key) >= 16, "the token key is a random secret of the process"
        self._key = key
        self._incarnation = incarnation

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()[:MAC_BYTES]

    def encode(self, kind: int, run_id: str, at: Position, issued_ms: int, tally: Tally) -> str:
        payload = LAYOUT.pack(TOKEN_VERSION, kind, self._incarnation, run_digest(run_id), at.group, at.offset,
                              issued_ms, tally.selected, tally.incomplete, tally.observed_cost_usd,
                              tally.selected_cost_usd, int(tally.usage_complete))
        return base64.urlsafe_b64encode(payload + self._mac(payload)).rstrip(b"=").decode()

    def decode(self, token: str, kind: int, run_id: str, now_ms: int) -> tuple[Position, Tally]:
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            raise PageTokenError("malformed: not a page token of this coordinator") from None
        if len(raw) != LAYOUT.size + MAC_BYTES:
            raise PageTokenError("malformed: not a page token of this coordinator")
        payload, mac = raw[:LAYOUT.size], raw[LAYOUT.size:]
        (version, token_kind, incarnation, digest, group, offset, issued_ms, selected, incomplete, observed,
         selected_cost, usage_complete) = LAYOUT.unpack(payload)
        if version != TOKEN_VERSION:
            raise PageTokenError(f"malformed: token version {version} is not {TOKEN_VERSION}")
        if incarnation != self._incarnation:
            raise PageTokenError("stale: issued by an earlier coordinator process (it restarted since); "
                                 "list again from the first page")
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise PageTokenError("forged: the token does not verify (it was altered or made up)")
        if token_kind != kind:
            raise PageTokenError(f"the token continues a {KIND_NAMES.get(token_kind, '?')} listing, "
                                 f"not {KIND_NAMES[kind]}")
        if digest != run_digest(run_id):
            raise PageTokenError(f"the token belongs to another run's listing, not run {run_id}")
        if now_ms - issued_ms > PAGE_TOKEN_TTL_MS:
            raise PageTokenError(f"stale: issued {(now_ms - issued_ms) // 1000} s ago, past the "
                                 f"{PAGE_TOKEN_TTL_MS // 1000} s a token lives; list again from the first page")
        return Position(group, offset), Tally(selected=selected, incomplete=incomplete, observed_cost_usd=observed,
                                              selected_cost_usd=selected_cost, usage_complete=bool(usage_complete))
