#!/usr/bin/env node
// A minimal fleet worker in Node.js: the session with the coordinator. It loads
// protos/fleet/v1/coordinator.proto at run time (no generated code) and runs command-executor
// cells with executor.js; its environment identity comes from identity.js.
//
//   node worker.js --coordinator HOST:PORT --token-file FILE --worker-id ID --slots N \
//                  --state-dir DIR --bench-root DIR [--tls-ca FILE] [--insecure]
//                  [--cpu-millis N] [--memory-mb N] [--drain-timeout-s N]
//   node worker.js identity --bench-root DIR        (prints the manifest and its id)
//
// Protocol rules kept here (the proto comments are the contract):
//  * Hello is the first frame (seq 1) of every stream; seq grows by one per frame; the
//    credential travels in call metadata only. Welcome.worker_credential (first enrollment
//    only) is saved 0600 before anything else and presented on every later session.
//  * Heartbeats every Welcome.heartbeat_interval_ms carry the owned assignment ids.
//  * All cells of a pushed group start together; a repeated push is ignored; groups outlive
//    streams; a revoke kills the group's processes (their reports still go out, as late
//    evidence) and the group is finished without GroupFinished.
//  * A report is sent only after each of its artifacts was acknowledged as durable on the
//    same stream: a probe with empty data, then chunks of at most 1 MiB at the committed
//    offset, `last` on the final one (a DUPLICATE ack: the coordinator already holds it).
//  * A report leaves the outbox only on ACCEPTED, DUPLICATE or LATE; it is resent, unchanged,
//    on every new stream until then. GroupFinished goes out after all reports of the group
//    settled. A refusal no resend can fix is dead-lettered (DeadLetter frame).
//  * UNAUTHENTICATED, PERMISSION_DENIED or FAILED_PRECONDITION on the stream: exit 2; any
//    other end of a stream: reconnect with exponential backoff and full jitter.
//  * SIGTERM (or the coordinator's drain frame): no new work, running groups settle, the
//    outbox is flushed, Goodbye, exit 0; a second signal stops at once.
// NOT kept: the outbox lives in memory (the artifact files sit on disk, without a durable
// index), so reports not yet acknowledged when this process dies are lost; the coordinator
// expires the group and redispatches it. See README.md.
'use strict';

const fs = require('node:fs');
const fsp = require('node:fs/promises');
const os = require('node:os');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { identity, cellEnvironmentId, measureKeys } = require('./identity');
const { runCell, expectedStatus, oneLine, E, V, ID_CHARS_MAX } = require('./executor');

// common/limits.py and worker/config.py
const CHUNK_BYTES_MAX = 1 << 20;
const MESSAGE_BYTES_MAX = 8 << 20;
const HEARTBEAT_MS = { min: 10, max: 60000, default: 1000 };
const BACKOFF_MS = { min: 100, max: 10000 };
const KEEPALIVE_MS = { time: 20000, timeout: 10000 };
const WELCOME_TIMEOUT_MS = 30000;
const GOODBYE_ACK_TIMEOUT_MS = 2000;
const DELIVERIES_IN_FLIGHT_MAX = 16;
const REPORT_SENDS_MAX = 3;
const UPLOAD_RESTARTS_MAX = 3;
// The protocol revision this worker speaks (it implies ACK_BATCH): read from protos/fleet/v1/
// common.proto `ProtocolRevision`, the one list of revisions, once the protos are loaded.
const PROTOCOL_REVISION = 'PROTOCOL_REVISION_RUN_OFFER';
const EXIT_OK = 0, EXIT_FAILURE = 1, EXIT_OPERATOR = 2;
const PERMANENT = new Set([grpc.status.UNAUTHENTICATED, grpc.status.PERMISSION_DENIED,
  grpc.status.FAILED_PRECONDITION]);
const SETTLED = new Set(['ACK_OUTCOME_ACCEPTED', 'ACK_OUTCOME_DUPLICATE', 'ACK_OUTCOME_LATE']);
const UPLOAD_RESTARTABLE = new Set(['REJECTION_REASON_DIGEST_MISMATCH', 'REJECTION_REASON_LENGTH_MISMATCH',
  'REJECTION_REASON_CHUNK_OUT_OF_RANGE', 'REJECTION_REASON_STORAGE_FULL']);
const PROTOS = path.resolve(__dirname, '..', '..', 'protos');

function log(level, event, fields = {}) {
  process.stderr.write(JSON.stringify({ ts: new Date().toISOString(), level, event, ...fields }) + '\n');
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
class OperatorError extends Error {}

// The number of a ProtocolRevision value, by name, from the loaded protos.
function revisionNumber(def, name) {
  const e = def['fleet.v1.ProtocolRevision'];
  const v = e && e.type.value.find((x) => x.name === name);
  if (!v) throw new Error(`protos/fleet/v1/common.proto has no ProtocolRevision ${name}`);
  return v.number;
}

// ---- flags and the state directory --------------------------------------------------------
function parseArgs(argv) {
  const flags = { slots: '1', 'drain-timeout-s': '10' };
  const booleans = new Set(['insecure']);
  for (let i = 0; i < argv.length; i++) {
    const m = /^--([a-z-]+)(?:=(.*))?$/.exec(argv[i]);
    if (!m) throw new OperatorError(`unexpected argument ${argv[i]}`);
    if (booleans.has(m[1])) { flags[m[1]] = true; continue; }
    const value = m[2] !== undefined ? m[2] : argv[++i];
    if (value === undefined) throw new OperatorError(`--${m[1]} needs a value`);
    flags[m[1]] = value;
  }
  return flags;
}

function config(flags) {
  for (const f of ['coordinator', 'token-file', 'worker-id', 'state-dir', 'bench-root']) {
    if (!flags[f]) throw new OperatorError(`--${f} is required`);
  }
  const slots = Number(flags.slots);
  if (!Number.isInteger(slots) || slots < 1 || slots > 1024) throw new OperatorError('--slots must be 1..1024');
  const benchRoot = path.resolve(flags['bench-root']);
  if (!fs.statSync(benchRoot, { throwIfNoEntry: false })?.isDirectory()) {
    throw new OperatorError(`--bench-root ${benchRoot} is not a directory`);
  }
  const host = flags.coordinator.replace(/:\d+$/, '').replace(/^\[|\]$/g, '');
  const loopback = host === 'localhost' || host === '::1' || /^127\./.test(host);
  if (!flags['tls-ca'] && !loopback && !flags.insecure) {
    throw new OperatorError('plaintext is allowed to loopback only: pass --tls-ca FILE (or --insecure)');
  }
  return {
    coordinator: flags.coordinator, tokenFile: flags['token-file'], workerId: flags['worker-id'],
    slots, stateDir: path.resolve(flags['state-dir']), benchRoot, tlsCa: flags['tls-ca'] || '',
    cpuMillis: Number(flags['cpu-millis']) || os.availableParallelism() * 1000,
    memoryMb: Number(flags['memory-mb']) || Math.floor(os.totalmem() / (1 << 20)),
    drainTimeoutMs: Number(flags['drain-timeout-s']) * 1000,
  };
}

function writeFileDurable(file, data, mode = 0o644) {
  const tmp = `${file}.tmp-${process.pid}`;
  const fd = fs.openSync(tmp, 'w', mode);
  try { fs.writeSync(fd, data); fs.fsyncSync(fd); } finally { fs.closeSync(fd); }
  fs.chmodSync(tmp, mode);
  fs.renameSync(tmp, file);
  const dfd = fs.openSync(path.dirname(file), 'r');
  try { fs.fsyncSync(dfd); } finally { fs.closeSync(dfd); }
}

/** Lock the state dir (one process per dir), count this incarnation, clear old scratch. */
function openState(cfg) {
  fs.mkdirSync(cfg.stateDir, { recursive: true, mode: 0o700 });
  const lock = path.join(cfg.stateDir, 'lock');
  const holder = Number(fs.existsSync(lock) ? fs.readFileSync(lock, 'utf8') : 0);
  if (holder && holder !== process.pid) {
    let alive = true;
    try { process.kill(holder, 0); } catch (e) { alive = e.code === 'EPERM'; }
    if (alive) throw new OperatorError(`state dir ${cfg.stateDir} is in use by pid ${holder}`);
  }
  writeFileDurable(lock, String(process.pid));
  const idFile = path.join(cfg.stateDir, 'worker_id');
  if (fs.existsSync(idFile) && fs.readFileSync(idFile, 'utf8') !== cfg.workerId) {
    throw new OperatorError(`state dir ${cfg.stateDir} belongs to worker ${fs.readFileSync(idFile, 'utf8')}`);
  }
  writeFileDurable(idFile, cfg.workerId);
  const incFile = path.join(cfg.stateDir, 'incarnation');
  const incarnation = (Number(fs.existsSync(incFile) ? fs.readFileSync(incFile, 'utf8') : 0) || 0) + 1;
  writeFileDurable(incFile, String(incarnation));
  const attempts = path.join(cfg.stateDir, 'attempts');
  fs.rmSync(attempts, { recursive: true, force: true }); // nothing replays them (no durable outbox)
  fs.mkdirSync(attempts);
  return { incarnation, attempts, credentialFile: path.join(cfg.stateDir, 'credential'), lock };
}

// ---- the session --------------------------------------------------------------------------
class StreamClosed extends Error {}

/** One bidi call: numbering, and the acks awaited by seq. Dies with the call. */
class Stream {
  constructor(call) {
    this.call = call; this.seq = 0; this.acks = new Map(); this.closed = false;
    this.uploads = 0; this.durable = new Set(); this.uploading = new Map(); this.delivering = new Set(); this.finishing = new Set();
    this.done = new Promise((resolve) => { this.resolveDone = resolve; });
  }
  send(name, msg, ack = false) {
    if (this.closed) return Promise.reject(new StreamClosed('stream closed'));
    const seq = ++this.seq;
    const p = ack ? new Promise((res, rej) => this.acks.set(seq, { res, rej })) : Promise.resolve(null);
    this.call.write({ seq, [name]: msg });
    return p;
  }
  request(name, msg) { return this.send(name, msg, true); }
  onAck(ack) { const w = this.acks.get(ack.seq); if (w) { this.acks.delete(ack.seq); w.res(ack); } }
  close(why) {
    if (this.closed) return;
    this.closed = true;
    for (const w of this.acks.values()) w.rej(new StreamClosed(why));
    this.acks.clear();
    try { this.call.cancel(); } catch { /* already ended */ }
    this.resolveDone(why);
  }
}

class Worker {
  constructor(cfg, state, ident) {
    Object.assign(this, { cfg, state, ident });
    this.held = new Map(); // assignment id -> {runId, cellsLeft, unsettled, running, revoked, handedBack, abort}
    this.outbox = new Map(); // attempt id -> {attemptId, assignmentId, frame (CellReport), files, dir}
    this.finished = new Set();
    this.runningCells = 0;
    this.heartbeatMs = HEARTBEAT_MS.default;
    this.draining = false; this.closing = false; this.stream = null;
    this.waiters = [];
    const existing = fs.existsSync(state.credentialFile) ? fs.readFileSync(state.credentialFile, 'utf8').trim() : '';
    try { this.token = existing || fs.readFileSync(cfg.tokenFile, 'utf8').trim(); } catch (e) {
      throw new OperatorError(`cannot read --token-file ${cfg.tokenFile}: ${e.code || e.message}`);
    }
    if (!this.token) throw new OperatorError(`--token-file ${cfg.tokenFile} is empty`);
    const def = protoLoader.loadSync('fleet/v1/coordinator.proto', { includeDirs: [PROTOS], keepCase: true,
      longs: Number, enums: String, defaults: true, oneofs: true });
    const { Coordinator } = grpc.loadPackageDefinition(def).fleet.v1;
    this.protocolVersion = revisionNumber(def, PROTOCOL_REVISION);
    const creds = cfg.tlsCa ? grpc.credentials.createSsl(fs.readFileSync(cfg.tlsCa)) : grpc.credentials.createInsecure();
    this.client = new Coordinator(cfg.coordinator, creds, {
      'grpc.max_send_message_length': MESSAGE_BYTES_MAX, 'grpc.max_receive_message_length': MESSAGE_BYTES_MAX,
      'grpc.keepalive_time_ms': KEEPALIVE_MS.time, 'grpc.keepalive_timeout_ms': KEEPALIVE_MS.timeout, 'grpc.keepalive_permit_without_calls': 1,
      'grpc.initial_reconnect_backoff_ms': BACKOFF_MS.min, 'grpc.max_reconnect_backoff_ms': BACKOFF_MS.max });
  }

  changed() { const w = this.waiters; this.waiters = []; for (const r of w) r(); }
  nextChange() { return new Promise((r) => this.waiters.push(r)); }

  async run() {
    let failures = 0;
    while (!this.closing) {
      const outcome = await this.streamOnce();
      if (outcome === 'closed') return EXIT_OK;
      if (outcome === 'welcomed') failures = 0;
      const delay = BACKOFF_MS.min + Math.random() * (Math.min(BACKOFF_MS.max, BACKOFF_MS.min * 2 ** Math.min(failures++, 20)) - BACKOFF_MS.min);
      log('info', 'reconnecting', { in_ms: Math.round(delay), failures });
      await sleep(delay);
    }
    return EXIT_OK;
  }

  async streamOnce() {
    const md = new grpc.Metadata();
    md.set('authorization', `Bearer ${this.token}`);
    md.set('x-fleet-worker-id', this.cfg.workerId);
    const s = new Stream(this.client.Session(md));
    let welcomed = false, refused = null;
    const welcome = new Promise((resolve) => { s.onWelcome = resolve; });
    s.call.on('data', (frame) => {
      if (!welcomed) {
        if (frame.body !== 'welcome') { s.close(`first coordinator frame is ${frame.body}, not welcome`); return; }
        welcomed = true; s.onWelcome(frame.welcome); return;
      }
      this.onFrame(s, frame).catch((e) => { log('error', 'frame handling failed', { error: String(e.stack || e) }); s.close('worker error'); });
    });
    s.call.on('error', (e) => {
      if (PERMANENT.has(e.code)) refused = e;
      s.close(`${grpc.status[e.code]}: ${e.details}`);
    });
    s.call.on('end', () => s.close('the coordinator ended the stream'));
    this.streamsOpened = (this.streamsOpened || 0) + 1;  // Hello.stream: a delayed Hello is refused, not reconciled
    s.send('hello', this.hello(this.streamsOpened)).catch(() => {});
    const timeout = setTimeout(() => s.close('no welcome in time'), WELCOME_TIMEOUT_MS);
    const w = await Promise.race([welcome, s.done.then(() => null)]);
    clearTimeout(timeout);
    if (w) {
      if (w.worker_credential) {
        // Saved before anything else happens: a crash now must not leave only a spent token.
        writeFileDurable(this.state.credentialFile, w.worker_credential, 0o600);
        this.token = w.worker_credential;
        log('info', 'worker credential issued and saved');
      }
      this.heartbeatMs = Math.max(HEARTBEAT_MS.min, Math.min(HEARTBEAT_MS.max, w.heartbeat_interval_ms || HEARTBEAT_MS.default));
      log('info', 'session open', { coordinator_incarnation: w.coordinator_incarnation, heartbeat_interval_ms: this.heartbeatMs, outbox_depth: this.outbox.size, held: this.held.size });
      this.stream = s;
      const beat = setInterval(() => s.send('heartbeat', this.heartbeat()).catch(() => {}), this.heartbeatMs);
      this.pump(s).catch((e) => { if (!(e instanceof StreamClosed)) { log('error', 'pump failed', { error: String(e.stack || e) }); s.close('worker error'); } });
      await s.done;
      clearInterval(beat);
      this.stream = null;
    }
    const why = await s.done;
    if (refused) {
      const e = new OperatorError(`refused by the coordinator: ${grpc.status[refused.code]}: ${refused.details}`);
      e.refused = true; throw e;
    }
    if (s.goodbyeAcked) return 'closed';
    log('warning', 'stream ended', { welcomed, cause: why });
    return welcomed ? 'welcomed' : 'failed';
  }

  hello(stream) {
    return {
      worker_id: this.cfg.workerId, incarnation: this.state.incarnation, slots: this.cfg.slots,
      cpu_millis: this.cfg.cpuMillis, memory_mb: this.cfg.memoryMb,
      environment: Object.entries(this.ident.manifest).map(([key, value]) => ({ key, value })),
      environment_id: this.ident.environmentId,
      cell_environment_id: cellEnvironmentId(this.ident.manifest),
      owned_assignment_ids: [...this.held].filter(([, h]) => h.running && !h.revoked).map(([a]) => a).sort(),
      buffered_attempt_ids: [...this.outbox.keys()],
      protocol_version: this.protocolVersion, software_version: `fleet-node-worker/${require('./package.json').version}`,
      stream,
    };
  }

  heartbeat() {
    return { owned_assignment_ids: [...this.held].filter(([, h]) => !h.revoked).map(([a]) => a).sort(),
      running_cells: this.runningCells, outbox_depth: this.outbox.size };
  }

  async onFrame(s, frame) {
    switch (frame.body) {
      case 'ack': s.onAck(frame.ack); break;
      case 'acks': for (const a of frame.acks.acks) s.onAck(a); break;
      case 'assignment': this.onPush(frame.assignment); break;
      case 'revoke': this.onRevoke(frame.revoke); break;
      case 'run_state': log('info', 'run state', frame.run_state); break;
      case 'run_offer': { // measure what the run names from this bench root; the coordinator compares
        const measured = measureKeys(frame.run_offer.keys, this.cfg.benchRoot);
        s.send('run_environment', { run_id: frame.run_offer.run_id,
          components: Object.entries(measured).map(([key, value]) => ({ key, value })) }).catch(() => {});
        break;
      }
      case 'run_refused':
        log('warning', 'this worker may not serve a run', { run: frame.run_refused.run_id,
          reason: frame.run_refused.reason, differences: frame.run_refused.differences.slice(0, 20) });
        break;
      case 'upload_status': break;
      case 'drain': // an operator's `fleetctl drain`: exactly as on SIGTERM
        log('info', 'drain requested by the coordinator', { reason: frame.drain.reason });
        this.drain().catch((e) => log('error', 'drain failed', { error: String(e) }));
        break;
      default: log('warning', 'unexpected coordinator frame ignored', { body: frame.body });
    }
  }

  onPush(push) {
    const aid = push.assignment_id;
    if (!aid || this.held.has(aid) || this.finished.has(aid)) { log('info', 'repeated push ignored', { assignment: aid }); return; }
    const held = { runId: push.run_id, cellsLeft: push.cells.length, unsettled: new Set(), running: true,
      revoked: false, handedBack: false, abort: new AbortController() };
    this.held.set(aid, held);
    if (this.draining) {
      Object.assign(held, { cellsLeft: 0, running: false, handedBack: true });
      log('info', 'push during drain: handing it back', { assignment: aid });
      this.changed(); return;
    }
    log('info', 'assignment received', { run: push.run_id, assignment: aid, generation: push.generation, cells: push.cells.length });
    this.runGroup(aid, held, push).catch((e) => { log('error', 'group failed', { assignment: aid, error: String(e.stack || e) }); process.exit(EXIT_FAILURE); });
  }

  onRevoke(revoke) {
    const held = this.held.get(revoke.assignment_id);
    log('info', 'assignment revoked', { assignment: revoke.assignment_id, reason: revoke.reason, held: !!held });
    if (!held) return;
    held.revoked = true;
    held.abort.abort();
    if (!held.running) this.finishLocally(revoke.assignment_id);
  }

  finishLocally(aid) { this.held.delete(aid); this.finished.add(aid); this.changed(); }

  async runGroup(aid, held, push) {
    let jobs = null, failure = '', envFailure = '';
    try {
      const obj = (text, name) => { const v = text ? JSON.parse(text) : {}; if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error(`${name} is not a JSON object`); return v; };
      const task = obj(push.task_json, 'task_json'), verifier = obj(push.verifier_json, 'verifier_json');
      const executor = obj(push.executor_json, 'executor_json'), budget = obj(push.budget_json, 'budget_json');
      if (!Number.isInteger(budget.timeoutSeconds) || budget.timeoutSeconds < 1) throw new Error('budget_json.timeoutSeconds is not a positive integer');
      if (push.subject_json.length !== push.cells.length) throw new Error('cells and subjects differ in number');
      if (executor.kind !== 'command') envFailure = `no executor for kind ${JSON.stringify(executor.kind)} on this worker (have: command)`;
      jobs = push.cells.map((cell, i) => ({ runId: push.run_id, attemptId: cell.attempt_id, cellId: cell.cell_id,
        taskId: push.task_id, repetition: push.repetition, subjectId: cell.subject_id, task,
        subject: obj(push.subject_json[i], `subject_json[${i}]`), verifier, subjectTimeoutS: budget.timeoutSeconds,
        benchRoot: this.cfg.benchRoot, attemptsDir: this.state.attempts }));
    } catch (e) { failure = `the assignment could not be read: ${e.message}`; }
    await Promise.all(push.cells.map(async (cell, i) => {
      let outcome;
      if (!jobs || envFailure) {
        const at = Date.now();
        const report = { execution: E.NOT_STARTED, verification: V.NOT_RUN, usage: 'USAGE_MISSING', cleanup: 'CLEANUP_CONFIRMED',
          environment_failure: oneLine(envFailure, ID_CHARS_MAX), started_ms: at, finished_ms: at,
          detail: oneLine(failure || envFailure), artifacts: [], unavailable: [] };
        report.status = expectedStatus(report);
        outcome = { report, files: [], dir: '' };
      } else {
        this.runningCells++;
        try { outcome = await runCell(jobs[i], held.abort.signal); } finally { this.runningCells--; }
      }
      const frame = { run_id: push.run_id, attempt_id: cell.attempt_id, assignment_id: aid,
        generation: push.generation, report: outcome.report };
      held.unsettled.add(cell.attempt_id);
      held.cellsLeft--;
      this.outbox.set(cell.attempt_id, { attemptId: cell.attempt_id, assignmentId: aid, frame, files: outcome.files, dir: outcome.dir });
      log('info', 'outcome buffered', { assignment: aid, attempt: cell.attempt_id, status: outcome.report.status,
        execution: outcome.report.execution, score: outcome.report.score ?? null });
      this.changed();
    }));
    held.running = false;
    if (held.revoked) this.finishLocally(aid); else this.changed();
  }

  /** Deliver every outbox entry and finish every ready group, on this stream, until it dies. */
  async pump(s) {
    while (!s.closed) {
      for (const entry of this.outbox.values()) {
        if (s.delivering.size >= DELIVERIES_IN_FLIGHT_MAX) break;
        if (s.delivering.has(entry.attemptId)) continue;
        s.delivering.add(entry.attemptId);
        this.deliver(s, entry).catch((e) => { if (!(e instanceof StreamClosed)) { log('error', 'delivery failed', { error: String(e.stack || e) }); s.close('worker error'); } })
          .finally(() => { s.delivering.delete(entry.attemptId); this.changed(); });
      }
      for (const [aid, h] of this.held) {
        if (!h.running && !h.revoked && h.cellsLeft === 0 && h.unsettled.size === 0 && !s.finishing.has(aid)) {
          s.finishing.add(aid);
          this.finishGroup(s, aid, h).catch(() => {}).finally(() => s.finishing.delete(aid));
        }
      }
      if (this.goodbyeDue && !s.goodbyeSent) { s.goodbyeSent = true; this.goodbye(s).catch(() => {}); }
      await Promise.race([this.nextChange(), s.done]);
    }
  }

  async deliver(s, entry) {
    for (let sends = 1; ; sends++) {
      for (const f of entry.files) {
        const outcome = await this.ensureUploaded(s, entry, f);
        if (outcome) { await this.deadLetter(s, entry, outcome); return; }
      }
      const ack = await s.request('cell_report', entry.frame);
      if (SETTLED.has(ack.outcome)) {
        log('info', 'report acknowledged', { attempt: entry.attemptId, outcome: ack.outcome });
        this.settle(entry); return;
      }
      if (ack.rejection === 'REJECTION_REASON_ARTIFACT_MISSING' && sends < REPORT_SENDS_MAX) {
        for (const f of entry.files) s.durable.delete(f.digest);
        continue;
      }
      if (ack.rejection === 'REJECTION_REASON_STORAGE_FULL') { await sleep(BACKOFF_MS.min * 2 ** Math.min(sends, 6)); continue; }
      await this.deadLetter(s, entry, `${ack.rejection}: ${ack.detail}`); return;
    }
  }

  settle(entry) {
    this.outbox.delete(entry.attemptId);
    if (entry.dir) fs.rmSync(entry.dir, { recursive: true, force: true });
    this.held.get(entry.assignmentId)?.unsettled.delete(entry.attemptId);
    this.changed();
  }

  async deadLetter(s, entry, reason) {
    reason = oneLine(reason) || 'refused';
    log('error', 'report dead-lettered', { attempt: entry.attemptId, reason });
    const h = this.held.get(entry.assignmentId);
    if (h) h.handedBack = true;
    this.settle(entry);
    await s.send('dead_letter', { attempt_id: entry.attemptId, reason });
  }

  /** Resolves '' once the coordinator holds f.digest (acked on this stream), else a reason. */
  async ensureUploaded(s, entry, f) {
    while (!s.durable.has(f.digest)) {
      const ongoing = s.uploading.get(f.digest);
      if (ongoing) { await ongoing; continue; } // another entry uploads the same bytes
      const p = this.upload(s, entry, f);
      s.uploading.set(f.digest, p.catch(() => {}));
      try {
        const problem = await p;
        if (problem) return problem;
        s.durable.add(f.digest);
      } finally { s.uploading.delete(f.digest); }
    }
    return '';
  }

  async upload(s, entry, f) {
    const uploadId = `u${++s.uploads}-${f.digest.slice(7, 23)}`;
    const chunk = (offset, data, last) => ({ upload_id: uploadId, attempt_id: entry.attemptId, digest: f.digest,
      total_length: f.size, offset, data, last });
    let ack = await s.request('upload_chunk', chunk(0, Buffer.alloc(0), false)); // the probe
    for (let restarts = 0; ; restarts++) {
      if (ack.outcome === 'ACK_OUTCOME_DUPLICATE') return '';
      if (ack.outcome === 'ACK_OUTCOME_REJECTED') {
        if (!UPLOAD_RESTARTABLE.has(ack.rejection) || restarts >= UPLOAD_RESTARTS_MAX) return `upload of ${f.name} refused: ${ack.rejection}: ${ack.detail}`;
        await sleep(BACKOFF_MS.min);
      }
      let offset = ack.committed_offset > f.size ? 0 : ack.committed_offset;
      const fd = await fsp.open(f.path, 'r');
      try {
        do { // stop-and-wait: each chunk at the committed offset, its ack before the next
          const n = Math.min(CHUNK_BYTES_MAX, f.size - offset);
          const data = Buffer.alloc(n);
          const { bytesRead } = await fd.read(data, 0, n, offset);
          if (bytesRead !== n) return `artifact ${f.name} file is shorter than its recorded ${f.size} bytes`;
          const last = offset + n === f.size;
          ack = await s.request('upload_chunk', chunk(offset, data, last));
          if (ack.outcome !== 'ACK_OUTCOME_ACCEPTED') break;
          if (last) return '';
          offset = ack.committed_offset;
        } while (offset <= f.size);
      } finally { await fd.close(); }
    }
  }

  async finishGroup(s, aid, h) {
    const reason = h.handedBack ? 'handed_back' : 'completed';
    const ack = await s.request('group_finished', { assignment_id: aid, reason });
    log(ack.outcome === 'ACK_OUTCOME_REJECTED' ? 'warning' : 'info', 'group finished',
      { assignment: aid, reason, outcome: ack.outcome, rejection: ack.rejection, detail: ack.detail });
    if (this.held.get(aid) === h) this.finishLocally(aid);
  }

  async goodbye(s) {
    const ack = s.request('goodbye', { reason: 'drained' });
    await Promise.race([ack, sleep(GOODBYE_ACK_TIMEOUT_MS)]);
    s.goodbyeAcked = true;
    s.call.end();
    s.close('goodbye');
  }

  /** SIGTERM: no new work; let running groups settle, flush, say Goodbye. */
  async drain() {
    if (this.draining) return;
    this.draining = true;
    log('info', 'draining: no new work', { running_groups: [...this.held.values()].filter((h) => h.running).length });
    this.stream?.send('drain_notice', { deadline_ms: this.cfg.drainTimeoutMs }, true).catch(() => {});
    const deadline = Date.now() + this.cfg.drainTimeoutMs;
    while ((this.held.size || this.outbox.size) && Date.now() < deadline) {
      await Promise.race([this.nextChange(), sleep(200)]);
    }
    if (this.held.size || this.outbox.size) {
      log('warning', 'drain timeout: cancelling and closing', { held: this.held.size, outbox_depth: this.outbox.size });
      for (const h of this.held.values()) h.abort.abort();
    }
    this.closing = true;
    if (!this.stream) return false;
    this.goodbyeDue = true;
    this.changed();
    return true;
  }
}

// ---- main ---------------------------------------------------------------------------------
async function main(argv) {
  if (argv[0] === 'identity') {
    const flags = parseArgs(argv.slice(1));
    if (!flags['bench-root']) throw new OperatorError('--bench-root is required');
    const { manifest, environmentId } = identity(path.resolve(flags['bench-root']));
    process.stdout.write(JSON.stringify({ environmentId, manifest }, null, 2) + '\n');
    return EXIT_OK;
  }
  const cfg = config(parseArgs(argv));
  const state = openState(cfg);
  const ident = identity(cfg.benchRoot);
  const worker = new Worker(cfg, state, ident);
  log('info', 'worker starting', { worker: cfg.workerId, incarnation: state.incarnation, slots: cfg.slots,
    environment_id: ident.environmentId });
  let signals = 0;
  const onSignal = async (sig) => {
    if (++signals > 1) { log('warning', 'second signal: stopping now', { signal: sig }); for (const h of worker.held.values()) h.abort.abort(); process.exit(128 + os.constants.signals[sig]); }
    if (!(await worker.drain())) process.exit(EXIT_OK);
  };
  process.on('SIGTERM', onSignal); process.on('SIGINT', onSignal);
  try {
    const code = await worker.run();
    log('info', 'worker stopped', { code });
    return code;
  } finally {
    try { fs.unlinkSync(state.lock); } catch { /* gone */ }
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then((code) => process.exit(code), (e) => {
    if (e instanceof OperatorError) { log('error', 'worker stopped', { reason: e.message }); process.exit(EXIT_OPERATOR); }
    log('error', 'worker crashed', { error: String(e.stack || e) });
    process.exit(EXIT_FAILURE);
  });
}

