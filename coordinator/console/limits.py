"""The console's named limits, unit last, each with where its number comes from. They bound
what one browser can make the coordinator hold or send: a page never grows with the run."""
from __future__ import annotations

# No response of the console is larger than this (the issue: "no response over a few MB"). A
# page at 100,000 cells is built well under it (tests/integration/test_console_chromium.py).
RESPONSE_BYTES_MAX = 2 << 20
# A run drawn cell by cell up to this many cells; above, its matrix aggregates consecutive
# task groups into rows (at most MATRIX_ROWS_MAX of them), each square a bucket's share.
MATRIX_CELLS_MAX = 2_400
MATRIX_ROWS_MAX = 120
# Rows of a paged table (cells, workers) per page.
TABLE_ROWS_MAX = 100
# The timeline draws every attempt up to this many; a larger run's timeline is left to
# `fleetctl report --html` (one SVG rect of about 250 bytes per attempt, plus its group's frame).
TIMELINE_CELLS_MAX = 3_000
# Messages kept for browsers that reconnect (Last-Event-ID), and their bytes: a message is one
# commit's events of one run (W1: a few hundred a second, about 1 KB each), so this is about a
# minute of a busy run; older than that, a page is told to resync.
EVENTS_KEPT_MAX = 20_000
EVENTS_KEPT_BYTES_MAX = 32 << 20
# One SSE message carries at most this many events (one commit's for one run, feed.py rule 2).
SSE_EVENTS_PER_MESSAGE_MAX = 256
# Event batches queued for one SSE client before it is cut (it reconnects and resumes).
SSE_CLIENT_BATCHES_MAX = 256
SSE_CLIENTS_MAX = 256
# Events reach a browser at most this late: an SSE stream writes what arrived in this window at
# once (one write per event per browser cost W1 about a fifth of a core with five browsers).
SSE_FLUSH_MS = 200
# A comment line this often keeps proxies and the browser from closing an idle stream.
SSE_KEEPALIVE_S = 15.0
# A page's data is read again at most this often, and never sooner than COST_FACTOR times what
# reading it took: five browsers share one read, a large run is read less often. A run page's
# read visits every cell on the actor's thread, a thousand cells a query, and folds them off it
# (W1's 6,000 cells: about 0.05 s of the actor's time and 0.1 s in all; docs/benchmarks.md), so
# at a factor of 100 a read costs at most about 1% of the time. A run's progress comes from its
# status alone, cheap at any size, and is refreshed every second.
REFRESH_MIN_MS = 1_000
REFRESH_COST_FACTOR = 100
# The longest a heavy part waits: a 1,000,000-cell run's read (about 10 s) at most every 10 min,
# so that the cost bound above holds at any size (its progress part still moves every second).
REFRESH_MAX_MS = 600_000
# Sessions of the login form, and how long one lasts.
SESSIONS_MAX = 10_000
SESSION_TTL_MS = 12 * 3600 * 1000
# A bulk retry plan (its dry run) lists at most this many cells, and is kept this long for the
# operator to confirm it.
BULK_RETRY_CELLS_MAX = 10_000
BULK_PLAN_TTL_MS = 10 * 60 * 1000
BULK_PLANS_MAX = 100
# Request bodies (the login and action forms) and an artifact shown inline.
REQUEST_BYTES_MAX = 64 << 10
ARTIFACT_INLINE_BYTES_MAX = 1 << 20
# The audit log of actions kept in memory for the fleet page (each is also a log line).
ACTIONS_KEPT_MAX = 200

assert MATRIX_CELLS_MAX * 200 < RESPONSE_BYTES_MAX  # about 150 bytes a drawn cell
assert TIMELINE_CELLS_MAX * 400 < RESPONSE_BYTES_MAX
assert TABLE_ROWS_MAX * 1_000 < RESPONSE_BYTES_MAX
assert BULK_RETRY_CELLS_MAX * 120 < RESPONSE_BYTES_MAX  # the dry run lists every cell id
assert REFRESH_MIN_MS <= REFRESH_MAX_MS
