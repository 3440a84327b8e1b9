"""Every named limit of fleet, with its unit last and where its number comes from.

Relations between limits are checked at import time, so an edit that breaks one (a grace
shorter than a few heartbeats) fails the first import instead of a run in production.
"""
from __future__ import annotations

# Liveness defaults (policy may override per run, within the bounds below).
HEARTBEAT_INTERVAL_MS_DEFAULT = 1_000
# Three missed heartbeats before a worker gets no new work: one lost frame is not suspicion.
SUSPECT_AFTER_MS_DEFAULT = 3 * HEARTBEAT_INTERVAL_MS_DEFAULT + 500
# Expiry redispatches paid work, so it waits long enough for a short network blip.
EXPIRE_AFTER_MS_DEFAULT = 15_000
# After a coordinator restart workers need time to reconnect and reconcile.
RECOVERY_GRACE_MS_DEFAULT = 30_000
RETRY_BACKOFF_MS_DEFAULT = 1_000
# A stream its worker's side closed or reset (a killed process: its kernel closes the socket
# at once) is not silence. The grace covers a supervised restart: systemd's RestartSec=200ms
# (tools/systemd) plus the worker's start, 0.35-0.6 s from exec to its hello here; about
# twice that. Past it the groups go back: a dead worker costs the grace, not the expiry.
STREAM_END_GRACE_MS_DEFAULT = 1_500
RETRY_BACKOFF_MAX_MS_DEFAULT = 60_000
MAX_ATTEMPTS_PER_CELL_DEFAULT = 3
# Model providers (coordinator/core/providers.py). A throttled attempt is not an attempt, but a
# provider that never admits the cell must end it: after this many throttled attempts of one
# cell it is incomplete, "provider throttled". With the provider's usual Retry-After of seconds
# to a minute, 20 tries wait out an outage of minutes to a quarter of an hour.
MAX_THROTTLED_ATTEMPTS_PER_CELL_DEFAULT = 20
MAX_THROTTLED_ATTEMPTS_PER_CELL_MAX = 10_000
THROTTLE_RETRY_AFTER_MS_DEFAULT = 1_000  # a throttled attempt whose provider named no Retry-After
RETRY_AFTER_MS_MAX = 3_600_000  # a Retry-After past an hour is read as an hour
# A named provider without a declared limit starts here and doubles its way up (slow start)
# until the first throttled attempt; after that it grows by one cell per PROVIDER_PROBE_FACTOR
# times its limit in attempts that were not throttled.
PROVIDER_INITIAL_CELLS = 8
PROVIDER_PROBE_FACTOR = 4
PROVIDER_CELLS_MAX = 1 << 20
PROVIDERS_PER_RUN_MAX = 64
# A broken worker (a full disk, a missing tool, a broken container runtime) fails every attempt
# fast and would claim the whole queue: after this many infrastructure failures in a row while
# other workers' attempts succeed it is quarantined, probed again after the backoff.
# Restore from a backup (coordinator/core/machine.py `_coordinator_restored`): the epoch's
# length, and how long dispatch waits, once every worker is back, for the results they offer.
EPOCH_CHARS_MAX = 16
RESTORE_OFFER_WINDOW_MS = 3_000
QUARANTINE_AFTER_FAILURES_DEFAULT = 5
QUARANTINE_BACKOFF_MS_DEFAULT = 60_000
QUARANTINE_BACKOFF_MAX_MS = 3_600_000
# A group deadline is derived from the budget: subject and verifier time, times a factor for
# the setup and cleanup the budget does not cover, plus a fixed slack.
GROUP_DEADLINE_FACTOR = 2
GROUP_DEADLINE_SLACK_MS = 60_000

# The coordinator's own outage (coordinator/actor.py `_tick`): ticks (every 200 ms) that come
# this much later than due, or an event loop that has not beaten for this long, mean the
# coordinator itself was not running (a frozen VM, a live migration, a stalled disk, a blocked
# loop), and whatever silence that caused expires nobody (a logged CoordinatorStalled).
COORDINATOR_STALL_MS = 2_000
LOOP_BEAT_MS = 250  # how often the event loop tells the actor it is alive

HEARTBEAT_INTERVAL_MS_MIN = 10
HEARTBEAT_INTERVAL_MS_MAX = 60_000
ATTEMPTS_PER_CELL_MAX = 100
SLOTS_PER_WORKER_MAX = 1_024
CELLS_PER_RUN_MAX = 2_000_000
ID_CHARS_MAX = 200
# A run's manifest names each bench file, task dir and tool its spec uses: a 10,000-task
# benchmark with a task dir each stays well inside, and a bounded frame.
MANIFEST_ENTRIES_MAX = 100_000
MANIFEST_KEY_CHARS_MAX = 1_024
MANIFEST_VALUE_CHARS_MAX = 256
SCORE_ABS_MAX = 1e12

# Wire and storage.
CHUNK_BYTES_MAX = 1 << 20  # 1 MiB per upload chunk keeps a frame well under MESSAGE_BYTES_MAX.
MESSAGE_BYTES_MAX = 8 << 20  # An assignment push of a large group, a spec of 100k cells compressed.
SPEC_BYTES_MAX = 64 << 20  # Admin submit of a very large spec travels unary, not on a session.
# The one message bigger than MESSAGE_BYTES_MAX: a SubmitRun of a spec up to SPEC_BYTES_MAX
# (its JSON as a string; a million cells is about 12 MB), its policy and the envelope. gRPC
# limits are per server, so the coordinator's receive limit is this, and a worker frame is held
# to MESSAGE_BYTES_MAX by the session servicer itself.
ADMIN_REQUEST_BYTES_MAX = SPEC_BYTES_MAX + (1 << 20)
ARTIFACT_BYTES_MAX = 1 << 30  # One artifact file; larger logs should be compressed by the adapter.
ARTIFACTS_PER_REPORT_MAX = 256
OUTBOX_ENTRIES_MAX = 100_000
# Protocol 4: cell reports per ReportBatch frame, and the bytes of reports one batch may
# carry (half a message leaves room for the frame around them).
REPORT_BATCH_REPORTS_MAX = 64
REPORT_BATCH_BYTES_MAX = (8 << 20) // 2
# Group commit of the worker's outbox: after the first queued operation the writer waits this
# long for more (the cells of a group finish within a millisecond or so of each other), and
# takes at most this many into one transaction and one fsync.
OUTBOX_GROUP_COMMIT_WAIT_MS = 1
OUTBOX_GROUP_COMMIT_OPS_MAX = 512
UPLOADS_IN_FLIGHT_MAX = 4
# Threads of a worker's python executor (worker/executor/pyfunc.py): one per cell running
# at once, started as needed; a subject that never returns keeps its thread for good.
CELL_THREADS_MAX = 256
ACTOR_QUEUE_COMMANDS_MAX = 10_000
COMMIT_BATCH_COMMANDS_MAX = 512
# Group commit of the coordinator's actor under load: when its last commit ended less than
# ACTOR_GATHER_AFTER_MS ago, the actor waits ACTOR_GATHER_WAIT_MS after a command arrives for
# the ones behind it, so that they share the commit (two fdatasyncs and a transaction, the
# largest share of the actor's CPU per command). In W1 (8 groups in flight) that took a
# third of the commits away and 7-11% of the coordinator's CPU per cell (median, and median of
# the paired ratios, of 6 alternating runs: docs/benchmarks.md), at the cost of up to 1 ms on
# the ack of a command that meets a busy actor; an isolated command is not held.
ACTOR_GATHER_WAIT_MS = 1
ACTOR_GATHER_AFTER_MS = 5
# A snapshot is encoded by a process of its own (coordinator/snapshotter.py), so its cost to the
# actor is starting it and the part writes, not the pickling. Recovery is the snapshot's load
# plus the tail replayed after it: at a million cells the load takes about 6 s and a record of
# the tail about 65 us to decode and step (docs/benchmarks.md), so a tail of 50,000 records
# (3.3 s) put the worst recovery past the 10 s goal, and 25,000 (1.6 s) keeps it under. The
# price: the snapshot process loads the last snapshot, replays up to 25,000 records and encodes
# (at a million cells about 30 s of its CPU, at nice SNAPSHOT_CHILD_NICE) twice as often.
SNAPSHOT_EVERY_RECORDS = 25_000
# A snapshot encoded in a child is stored in parts of this size, one LMDB transaction each,
# between the actor's batches: about 10 ms a part on this machine's disk (tools/bench/scale.py),
# so no part holds a slot refill past its 20 ms target. Retention's deletions go the same way,
# this many keys a transaction (about 2 us a key).
SNAPSHOT_PART_BYTES = 1 << 20
# Parts read from the snapshot child and not yet written by the actor: the coordinator holds at
# most this many (8 MiB) of a snapshot, never all of it (264 MB at a million cells).
SNAPSHOT_PARTS_AHEAD_MAX = 8
COMPACT_STEP_KEYS_MAX = 5_000
SESSION_SEND_QUEUE_FRAMES_MAX = 1_000
# Admin listings (GetResults, ListAttempts) come in pages built on the actor thread between
# commits: a page of 1,000 cells costs a few milliseconds there, the maximum page tens of
# milliseconds (tools/bench/scale.py), so no page stalls slot refills for long.
PAGE_ITEMS_DEFAULT = 1_000
PAGE_ITEMS_MAX = 5_000
# A page also ends when its encoding passes this: cells with many artifacts stay one message.
PAGE_BYTES_MAX = MESSAGE_BYTES_MAX // 2
# A listing of a million cells takes about a minute page by page; a token older than this is
# stale and refused (list again from the first page).
PAGE_TOKEN_TTL_MS = 60 * 60 * 1_000
KEEPALIVE_TIME_MS = 20_000
KEEPALIVE_TIMEOUT_MS = 10_000
# Liveness of an idle protocol-4 session is the transport's: the coordinator pings every
# connection this often (answered inside gRPC's C core, no Python runs on either side) and
# drops one whose answer is this late, which ends the stream and suspects the worker. The
# transport vouches only for workers that hold no group (core `_streams_alive`); a worker with
# a group heartbeats every interval and is suspected by its silence as before. So a silently
# dead idle worker (a lost VM, a partition; a killed process ends its stream at once) is
# noticed within TRANSPORT_DEAD_AFTER_MS (12 s), a busy one within SUSPECT_AFTER_MS_DEFAULT.
# Each ping costs the coordinator 50-90 us of gRPC core threads (their wake-ups): at 1 s,
# 1,000 idle connections cost 4.7% of a core in pings alone, at 10 s 0.9%
# (docs/benchmarks.md, "What an idle session costs").
SERVER_KEEPALIVE_TIME_MS = 10_000
SERVER_KEEPALIVE_TIMEOUT_MS = 2_000
# Calls the gRPC server accepts before the coordinator's event loop has picked them up
# (gRPC core's defaults, 1,000 and a hard 3,000, refuse streams at random past the first: a
# fleet of 10,000 reconnecting at once after a coordinator restart lost hundreds of hellos).
SERVER_PENDING_CALLS_MAX = 20_000
SERVER_PENDING_CALLS_HARD_MAX = 30_000
TRANSPORT_DEAD_AFTER_MS = SERVER_KEEPALIVE_TIME_MS + SERVER_KEEPALIVE_TIMEOUT_MS
# A protocol-4 worker whose heartbeat would say nothing new still sends one this often.
IDLE_HEARTBEAT_INTERVAL_MS = 30_000
# The coordinator collects and freezes what survived this often (coordinator/collector.py), so
# no collection walks more than one interval of survivors (a pass's stall is in proportion:
# at 10,000 sessions under load, 10 s of survivors took 240 ms, 1 s about a tenth); and walks
# everything, for cycles that became garbage after they were frozen, this often (0: never).
GC_FREEZE_EVERY_MS = 1_000
GC_FULL_EVERY_MS = 3_600_000
# The snapshot process's nice value: it works for seconds at a large run and must not take a
# core from the coordinator (slot refill waits for that core).
SNAPSHOT_CHILD_NICE = 10
# The snapshot process's oom_score_adj (the most the kernel accepts): it holds a second copy of
# the state, so on a host short of memory it is the one the OOM killer takes, never the
# coordinator (a lost snapshot is tried again; a killed coordinator restarts and snapshots again).
SNAPSHOT_CHILD_OOM_SCORE_ADJ = 1000
# What the snapshot process needs, judged from the coordinator's anonymous memory before it is
# started (at a million cells it peaked at 1,500 MB beside the coordinator's 1,150 MB of RssAnon;
# at 30,000 cells 100 MB beside 76): less room than that (coordinator/headroom.py), and the
# snapshot is encoded on the actor thread instead, a stall the kernel's OOM killer would not spare.
SNAPSHOT_CHILD_MEMORY_FACTOR = 1.3
SNAPSHOT_CHILD_MEMORY_BASE_BYTES = 64 << 20
RECONNECT_BACKOFF_MS_MIN = 100
RECONNECT_BACKOFF_MS_MAX = 10_000
# A worker that lost a stream while it holds groups or unacknowledged reports has paid work at
# stake: past the coordinator's stream-end grace its groups go to another worker and run again.
# Through that grace it tries again every REJOIN_ATTEMPT_MS, each try on a new channel and
# given that long to be welcomed: gRPC's own reconnect backoff grows 1.6x a try (by the fifth
# it waits past the grace, and the worker's backoff above likewise), and a Hello lost in the
# blip is resent at TCP's retransmission pace (0.2, 0.6, 1.4, 3 s). So a 1 s blip costs about
# one attempt period after the network is back, not the groups
# (tests/integration/test_netns_blip.py). A try abandoned after its Hello got through costs the
# coordinator one more registration; a window holds at most 7 tries. A worker with nothing at
# stake backs off as before: a fleet waiting out a coordinator restart does not hammer it.
REJOIN_ATTEMPT_MS = 200
REJOIN_WINDOW_MS = STREAM_END_GRACE_MS_DEFAULT

assert SUSPECT_AFTER_MS_DEFAULT >= 3 * HEARTBEAT_INTERVAL_MS_DEFAULT, "suspicion needs several missed beats"
# The transport vouches for idle workers only (they lose no group by dying): their silent death
# is noticed before silence would expire a busy worker, not within the suspicion window.
assert TRANSPORT_DEAD_AFTER_MS < EXPIRE_AFTER_MS_DEFAULT, "a dead idle transport is noticed before expiry"
# A stream end is news (its peer closed or reset it: a killed process) only when a frame came
# through it this recently: the keepalive ends a silent peer's stream only after the peer left
# a ping unanswered for SERVER_KEEPALIVE_TIMEOUT_MS, so it has been quiet for that long, less
# a network delay (500 ms allowed). Workers that hold groups heartbeat every interval (1 s).
STREAM_END_QUIET_MS_MAX = SERVER_KEEPALIVE_TIMEOUT_MS - 500
assert HEARTBEAT_INTERVAL_MS_DEFAULT < STREAM_END_QUIET_MS_MAX, "a busy worker's stream end can be news"
assert IDLE_HEARTBEAT_INTERVAL_MS >= 10 * HEARTBEAT_INTERVAL_MS_DEFAULT, "idle heartbeats are the exception"
assert EXPIRE_AFTER_MS_DEFAULT > SUSPECT_AFTER_MS_DEFAULT, "expiry must follow suspicion"
assert RECOVERY_GRACE_MS_DEFAULT >= EXPIRE_AFTER_MS_DEFAULT, "recovery grace covers a normal expiry"
assert RETRY_BACKOFF_MAX_MS_DEFAULT >= RETRY_BACKOFF_MS_DEFAULT
assert REPORT_BATCH_BYTES_MAX <= MESSAGE_BYTES_MAX // 2, "a batch of reports must fit one message"
assert STREAM_END_GRACE_MS_DEFAULT < EXPIRE_AFTER_MS_DEFAULT, "a stream end is news: it acts before silence would"
assert CHUNK_BYTES_MAX * 2 <= MESSAGE_BYTES_MAX, "a chunk plus its frame must fit one message"
assert ADMIN_REQUEST_BYTES_MAX > SPEC_BYTES_MAX >= MESSAGE_BYTES_MAX, "a spec submit is the largest message"
assert KEEPALIVE_TIMEOUT_MS < KEEPALIVE_TIME_MS
assert PAGE_ITEMS_DEFAULT <= PAGE_ITEMS_MAX
assert PAGE_BYTES_MAX + (1 << 20) <= MESSAGE_BYTES_MAX, "a full page plus its summary fits one message"
assert RECONNECT_BACKOFF_MS_MIN < RECONNECT_BACKOFF_MS_MAX
assert REJOIN_ATTEMPT_MS * 5 <= REJOIN_WINDOW_MS, "a blip's rejoin gets several tries inside the grace"

# Worker state directory (worker/outbox.py): the durable outbox, assignments, incarnation.
# The LMDB map is reserved address space, not disk: the file grows with the data. 16 GiB holds
# OUTBOX_ENTRIES_MAX reports of ~100 KiB with room for assignments and dead letters.
WORKER_STATE_MAP_BYTES = 16 << 30
# A stored report or assignment came from, or goes into, one message.
WORKER_RECORD_BYTES_MAX = MESSAGE_BYTES_MAX
# A duplicate push of an old assignment comes from a reconnect within minutes; this many
# finished ids cover days of a busy worker's groups.
FINISHED_ASSIGNMENTS_KEPT_MAX = 10_000
# Dead letters keep their artifact files for an operator; the oldest go first past this.
DEAD_LETTERS_MAX = 10_000
# What a worker keeps of the reports its coordinator acknowledged, to offer them again if that
# coordinator is restored from a backup that lacks them (worker/outbox.py `kept`): the oldest go
# first past any of the three bounds. Acknowledged reports are small (a few KiB) but name their
# artifacts, which stay on disk while kept.
KEPT_REPORTS_MS_DEFAULT = 3 * 24 * 3600_000
# How often an ack looks at the oldest kept entry's age (the byte and count bounds: every ack).
KEPT_AGE_CHECK_MS = 60_000
KEPT_REPORTS_BYTES_DEFAULT = 1 << 30
KEPT_REPORTS_MAX = 100_000
ARTIFACT_COPY_CHUNK_BYTES = 1 << 20

assert WORKER_STATE_MAP_BYTES >= 8 * WORKER_RECORD_BYTES_MAX, "the map holds several records"
assert WORKER_RECORD_BYTES_MAX <= MESSAGE_BYTES_MAX, "a stored record must fit one message"

# Worker executors (command and python) and environment identity.
# SIGTERM to SIGKILL when a subject or verifier overruns: enough to flush a log, short next to
# any budget (budgets are whole seconds, at least one).
PROCESS_KILL_GRACE_MS = 2_000
# The verdict is the verifier's last non-empty stdout line; a chatty verifier's log is not read
# whole, only this much of its end.
VERDICT_TAIL_BYTES_MAX = 64 << 10
# usage.json holds four numbers; anything bigger is not a usage file.
USAGE_FILE_BYTES_MAX = 64 << 10
# A report's detail is one short human line, not a log: logs travel as artifacts.
REPORT_DETAIL_CHARS_MAX = 500
# The stderr line carried into "EX_CONFIG: <line>"; with the prefix it fits ID_CHARS_MAX.
ENVIRONMENT_FAILURE_LINE_CHARS_MAX = 150
# `git rev-parse HEAD` answers in milliseconds; a hung one (a stale NFS mount) must not hang startup.
GIT_REVISION_TIMEOUT_MS = 2_000
# Credential redaction streams artifact files in chunks of this size.
REDACT_CHUNK_BYTES = 1 << 20

assert PROCESS_KILL_GRACE_MS < 1_000 * 60, "the kill grace must be short next to a budget"
assert len("EX_CONFIG: ") + ENVIRONMENT_FAILURE_LINE_CHARS_MAX <= ID_CHARS_MAX
assert REPORT_DETAIL_CHARS_MAX >= ID_CHARS_MAX

# Coordinator write-ahead store and artifact store (coordinator/store.py, coordinator/artifacts.py).
# The LMDB map is address space, not disk: the file grows with use. 1 GiB holds millions of
# small log records; a full map doubles up to the ceiling, which an operator raises with
# --map-size-mb.
STORE_MAP_BYTES_DEFAULT = 1 << 30
STORE_MAP_BYTES_MAX = 64 << 30
# Two snapshots: when the newest fails its checksum the older one, and every record after it,
# is still there. Compaction deletes records up to the older kept snapshot only.
SNAPSHOTS_KEPT = 2
# A logged command can carry a whole frozen spec; anything larger is a codec bug.
LOG_RECORD_BYTES_MAX = 2 * SPEC_BYTES_MAX
# Recovery reads the log in read transactions of this many records, so no reader is held
# across the caller's fold of a long log.
STORE_RECOVERY_BATCH_RECORDS = 1_024
# Upload keys name temp files: one path component, short enough for NAME_MAX with a suffix.
UPLOAD_KEY_CHARS_MAX = 200
# An upload untouched this long is abandoned (its worker is gone or restarted the upload).
ARTIFACT_TMP_AGE_MS_MAX = 24 * 60 * 60 * 1_000

assert STORE_MAP_BYTES_DEFAULT <= STORE_MAP_BYTES_MAX
assert SNAPSHOTS_KEPT >= 2, "falling back from a corrupt snapshot needs an older one"
assert LOG_RECORD_BYTES_MAX * 4 <= STORE_MAP_BYTES_DEFAULT, "a few large records fit the map"
assert UPLOAD_KEY_CHARS_MAX + len(".part") <= 255, "a temp file name fits NAME_MAX"
