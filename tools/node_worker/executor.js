// The command executor: a subject and then a verifier as processes, one cell attempt at a
// time (many at once), as worker/executor/command.py does.
//
// Each attempt gets a fresh dir under the worker's scratch root: work/ (the cwd and HOME,
// with the task's `dir` copied in; removed at the end, cleanup CONFIRMED only when it is really
// gone), tmp/ (TMPDIR) and artifacts/ (the four logs and artifacts/output/ = FLEET_OUTPUT_DIR,
// kept until the report is acknowledged). Processes run in their own process group with a
// minimal environment (PATH, locale, HOME, TMPDIR, FLEET_*) plus, for the subject only, the
// credentials it declares, scrubbed from every artifact and report string. Exit codes are
// evidence: 0 completed, 75 an infrastructure failure (retry), 78 a deterministic environment
// failure, anything else (or the budget's timeout) a measured subject failure, after which the
// verifier still judges. The verdict is the verifier's last non-empty stdout line, a JSON
// object with a finite `score`. Usage is output/usage.json: COMPLETE with inputTokens,
// outputTokens and costUsd, PARTIAL with some, MISSING without; never an invented zero.
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const fsp = require('node:fs/promises');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');

// common/limits.py
const ARTIFACT_BYTES_MAX = 1 << 30;
const ARTIFACTS_PER_REPORT_MAX = 256;
const ID_CHARS_MAX = 200;
const DETAIL_CHARS_MAX = 500;
const ENV_FAILURE_LINE_CHARS_MAX = 150;
const SCORE_ABS_MAX = 1e12;
const TOKENS_MAX = 2 ** 62;
const USAGE_FILE_BYTES_MAX = 64 << 10;
const VERDICT_TAIL_BYTES_MAX = 64 << 10;
const KILL_GRACE_MS = 2000;
const VERIFIER_TIMEOUT_S_DEFAULT = 60; // common/spec.py
// Files larger than this are not scrubbed in memory; with credentials declared they are
// recorded as unavailable instead of being uploaded unscrubbed.
const REDACT_FILE_BYTES_MAX = 256 << 20;
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const EX_TEMPFAIL = 75;
const EX_CONFIG = 78;

const sha256 = (data) => crypto.createHash('sha256').update(data).digest('hex');
const oneLine = (text, limit = DETAIL_CHARS_MAX) => {
  const t = String(text).split(/\s+/).filter(Boolean).join(' ');
  return t.length <= limit ? t : t.slice(0, limit - 1) + '…';
};

const E = { COMPLETED: 'EXECUTION_COMPLETED', SUBJECT_FAILED: 'EXECUTION_SUBJECT_FAILED',
  NOT_STARTED: 'EXECUTION_NOT_STARTED', UNKNOWN: 'EXECUTION_UNKNOWN' };
const V = { VALID: 'VERIFICATION_VALID', INVALID: 'VERIFICATION_INVALID', NOT_RUN: 'VERIFICATION_NOT_RUN' };

/** common/evidence.py expected_status: the only mapping from evidence to status. */
function expectedStatus(r) {
  const selectable = (r.execution === E.COMPLETED || r.execution === E.SUBJECT_FAILED)
    && r.verification === V.VALID && r.cleanup === 'CLEANUP_CONFIRMED' && !r.environment_failure;
  if (selectable) return r.execution === E.COMPLETED ? 'STATUS_COMPLETED' : 'STATUS_SUBJECT_FAILED';
  if (r.environment_failure || r.execution === E.NOT_STARTED) return 'STATUS_INFRA_FAILED';
  return 'STATUS_INDETERMINATE';
}

const PLACEHOLDER = /\{\{\s*([^{}]*?)\s*\}\}/g;
function substitute(text, values) {
  return String(text).replace(PLACEHOLDER, (_, name) => {
    if (!(name in values)) throw new Error(`unknown placeholder {{${name}}} (known: ${Object.keys(values).join(', ')})`);
    return values[name];
  });
}

function finiteScore(v) {
  return typeof v === 'number' && Number.isFinite(v) && Math.abs(v) <= SCORE_ABS_MAX ? v : null;
}

function lastLine(file) {
  try {
    const fd = fs.openSync(file, 'r');
    try {
      const size = fs.fstatSync(fd).size;
      const n = Math.min(size, VERDICT_TAIL_BYTES_MAX);
      const buf = Buffer.alloc(n);
      fs.readSync(fd, buf, 0, n, size - n);
      const lines = buf.toString('utf8').split(/\r?\n/).map((l) => l.trim()).filter(Boolean);
      return lines.length ? lines[lines.length - 1] : '';
    } finally { fs.closeSync(fd); }
  } catch { return ''; }
}

function killGroup(pid, sig) { try { process.kill(-pid, sig); } catch { /* already gone */ } }

/** One process in its own process group, stdout/stderr to files. Resolves
 * {ended: exited|timeout|cancelled|spawn_failed, code (negative: signal), error}. */
function runProcess(argv, { cwd, env, out, err, timeoutS, cancel }) {
  return new Promise((resolve) => {
    let outFd, errFd;
    try { fs.mkdirSync(cwd, { recursive: true }); outFd = fs.openSync(out, 'w'); errFd = fs.openSync(err, 'w'); } catch (e) {
      resolve({ ended: 'setup_failed', error: e.message }); return;
    }
    let ended = null, timer = null, graceTimer = null, settled = false, child;
    try {
      child = spawn(argv[0], argv.slice(1), { cwd, env, stdio: ['ignore', outFd, errFd], detached: true });
    } catch (e) {
      resolve({ ended: 'spawn_failed', error: `${argv[0]}: ${e.code || e.message}` }); return;
    } finally { fs.closeSync(outFd); fs.closeSync(errFd); }
    const onCancel = () => { ended = ended || 'cancelled'; if (child.pid) killGroup(child.pid, 'SIGKILL'); };
    child.once('error', (e) => {
      if (child.pid === undefined && !settled) { settled = true; cleanup(); resolve({ ended: 'spawn_failed', error: `${argv[0]}: ${e.code || e.message}` }); }
    });
    child.once('exit', (code, signal) => {
      if (settled) return;
      settled = true;
      cleanup();
      killGroup(child.pid, 'SIGKILL'); // nothing the process left behind outlives this phase
      const num = code !== null ? code : -(os.constants.signals[signal] || 0);
      resolve({ ended: ended || 'exited', code: num, signal });
    });
    function cleanup() { clearTimeout(timer); clearTimeout(graceTimer); cancel.removeEventListener('abort', onCancel); }
    cancel.addEventListener('abort', onCancel);
    if (cancel.aborted) onCancel();
    timer = setTimeout(() => {
      ended = ended || 'timeout';
      killGroup(child.pid, 'SIGTERM');
      graceTimer = setTimeout(() => killGroup(child.pid, 'SIGKILL'), KILL_GRACE_MS);
    }, timeoutS * 1000);
  });
}

function readUsage(file, ev) {
  let st;
  try { st = fs.lstatSync(file); } catch { return; }
  if (!st.isFile() || st.size > USAGE_FILE_BYTES_MAX) { ev.notes.push('usage.json is not a small regular file'); return; }
  let v;
  try { v = JSON.parse(fs.readFileSync(file, 'utf8')); } catch { ev.notes.push('usage.json unparseable'); return; }
  if (!v || typeof v !== 'object' || Array.isArray(v)) { ev.notes.push('usage is not an object'); return; }
  const bad = [];
  for (const [key, field] of [['inputTokens', 'input_tokens'], ['outputTokens', 'output_tokens'], ['cachedTokens', 'cached_tokens']]) {
    if (!(key in v)) continue;
    if (Number.isSafeInteger(v[key]) && v[key] >= 0 && v[key] <= TOKENS_MAX) ev.usageFields[field] = v[key]; else bad.push(key);
  }
  if ('costUsd' in v) {
    if (typeof v.costUsd === 'number' && Number.isFinite(v.costUsd) && v.costUsd >= 0) ev.usageFields.cost_usd = v.costUsd;
    else bad.push('costUsd');
  }
  const core = ['input_tokens', 'output_tokens', 'cost_usd'].filter((f) => f in ev.usageFields).length;
  ev.usage = core === 3 ? 'USAGE_COMPLETE' : Object.keys(ev.usageFields).length ? 'USAGE_PARTIAL' : 'USAGE_MISSING';
  if (bad.length) ev.notes.push(`usage fields ignored as invalid: ${bad.join(', ')}`);
}

function safeName(id) { return id.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 100) + '-' + sha256(id).slice(0, 12); }

/** Run one cell: subject, then verifier, in a fresh dir. Returns {report, files, dir}. */
async function runCell(job, cancel) {
  const started = Date.now();
  const ev = { execution: E.UNKNOWN, verification: V.NOT_RUN, score: null, envFailure: '',
    usage: 'USAGE_MISSING', usageFields: {}, notes: [] };
  const root = path.join(job.attemptsDir, safeName(job.attemptId));
  const dirs = { root, work: path.join(root, 'work'), tmp: path.join(root, 'tmp'),
    artifacts: path.join(root, 'artifacts'), output: path.join(root, 'artifacts', 'output') };
  const secrets = [];
  const finish = () => finishCell(job, ev, dirs, secrets, started);
  const credentials = {};
  for (const name of job.subject.credentials || []) {
    if (!(name in process.env)) { ev.execution = E.NOT_STARTED; ev.envFailure = `credential ${name} is not set on this worker`; return finish(); }
    credentials[name] = process.env[name];
    if (process.env[name]) secrets.push(process.env[name]);
  }
  const values = { 'task.id': String(job.task.id ?? ''), 'task.input': String(job.task.input ?? ''),
    'subject.id': job.subjectId, repetition: String(job.repetition), bench_root: job.benchRoot };
  let subjectArgv, verifierArgv;
  try {
    subjectArgv = [job.subject.command, ...(job.subject.args || [])].map((a) => substitute(a, values));
    verifierArgv = [job.verifier.command, ...(job.verifier.args || [])].map((a) => substitute(a, values));
  } catch (e) { ev.execution = E.NOT_STARTED; ev.envFailure = oneLine(e.message, ID_CHARS_MAX); return finish(); }
  try {
    fs.rmSync(root, { recursive: true, force: true });
    for (const d of [dirs.work, dirs.tmp, dirs.output]) fs.mkdirSync(d, { recursive: true });
    if (job.task.dir) {
      const benchReal = fs.realpathSync(job.benchRoot);
      const src = path.resolve(benchReal, job.task.dir);
      if (!src.startsWith(benchReal + path.sep)) { ev.execution = E.NOT_STARTED; ev.envFailure = `task dir ${JSON.stringify(job.task.dir)} leaves the bench root`; return finish(); }
      if (!fs.statSync(src, { throwIfNoEntry: false })?.isDirectory()) { ev.execution = E.NOT_STARTED; ev.envFailure = `task dir ${JSON.stringify(job.task.dir)} not found under the bench root`; return finish(); }
      fs.cpSync(src, dirs.work, { recursive: true, verbatimSymlinks: true });
    }
  } catch (e) { ev.execution = E.NOT_STARTED; ev.notes.push(`could not prepare the attempt dir: ${e.message}`); return finish(); }
  if (cancel.aborted) { ev.notes.push('cancelled'); return finish(); }
  const env = { PATH: DEFAULT_PATH, LANG: 'C.UTF-8', LC_ALL: 'C.UTF-8', HOME: dirs.work, TMPDIR: dirs.tmp,
    FLEET_RUN_ID: job.runId, FLEET_TASK_ID: job.taskId, FLEET_TASK_INPUT: values['task.input'],
    FLEET_REPETITION: values.repetition, FLEET_SUBJECT_ID: job.subjectId, FLEET_CELL_ID: job.cellId,
    FLEET_ATTEMPT_ID: job.attemptId, FLEET_OUTPUT_DIR: dirs.output, FLEET_BENCH_ROOT: job.benchRoot };
  const io = (role) => ({ cwd: dirs.work, out: path.join(dirs.artifacts, `${role}.stdout`), err: path.join(dirs.artifacts, `${role}.stderr`), cancel });
  const ran = await runProcess(subjectArgv, { ...io('subject'), env: { ...credentials, ...env }, timeoutS: job.subjectTimeoutS });
  let verify = false;
  if (ran.ended === 'spawn_failed') { ev.execution = E.NOT_STARTED; ev.envFailure = oneLine(`cannot start subject: ${ran.error}`, ID_CHARS_MAX); }
  else if (ran.ended === 'setup_failed') { ev.execution = E.NOT_STARTED; ev.notes.push(`could not prepare the subject's run: ${ran.error}`); }
  else if (ran.ended === 'cancelled') { /* below */ }
  else if (ran.ended === 'timeout') { ev.execution = E.SUBJECT_FAILED; ev.notes.push(`timeout after ${job.subjectTimeoutS}s`); verify = true; }
  else if (ran.code === 0) { ev.execution = E.COMPLETED; ev.notes.push('subject completed'); verify = true; }
  else if (ran.code === EX_TEMPFAIL) { ev.execution = E.UNKNOWN; ev.notes.push('subject exit 75 (EX_TEMPFAIL): infrastructure failure, verifier skipped'); }
  else if (ran.code === EX_CONFIG) {
    ev.execution = E.NOT_STARTED; ev.notes.push('subject exit 78 (EX_CONFIG)');
    ev.envFailure = 'EX_CONFIG: ' + oneLine(lastLine(path.join(dirs.artifacts, 'subject.stderr')) || '(nothing on stderr)', ENV_FAILURE_LINE_CHARS_MAX);
  } else { ev.execution = E.SUBJECT_FAILED; ev.notes.push(ran.code < 0 ? `subject killed by signal ${ran.signal}` : `subject exit code ${ran.code}`); verify = true; }
  if (ran.ended !== 'spawn_failed' && ran.ended !== 'setup_failed') readUsage(path.join(dirs.output, 'usage.json'), ev);
  if (ran.ended === 'cancelled') return cancelled(ev, finish);
  if (verify) {
    const timeoutS = Number(job.verifier.timeoutSeconds) || VERIFIER_TIMEOUT_S_DEFAULT;
    const vran = await runProcess(verifierArgv, { ...io('verifier'), env, timeoutS });
    if (vran.ended === 'cancelled') return cancelled(ev, finish);
    judgeVerifier(vran, ev, path.join(dirs.artifacts, 'verifier.stdout'), timeoutS);
  }
  return finish();
}

function cancelled(ev, finish) {
  Object.assign(ev, { execution: E.UNKNOWN, verification: V.NOT_RUN, score: null });
  ev.notes.push('cancelled');
  return finish();
}

function judgeVerifier(ran, ev, stdoutFile, timeoutS) {
  ev.verification = V.INVALID;
  if (ran.ended === 'spawn_failed') { ev.envFailure = oneLine(`cannot start verifier: ${ran.error}`, ID_CHARS_MAX); ev.notes.push('verifier did not start'); return; }
  if (ran.ended === 'setup_failed') { ev.notes.push(`could not prepare the verifier's run: ${ran.error}`); return; }
  if (ran.ended === 'timeout') { ev.notes.push(`verifier timeout after ${timeoutS}s`); return; }
  if (ran.code === EX_TEMPFAIL) { ev.notes.push('verifier infrastructure failure'); return; }
  if (ran.code !== 0) { ev.notes.push(ran.code < 0 ? `verifier killed by signal ${ran.signal}` : `verifier exit code ${ran.code}`); return; }
  const line = lastLine(stdoutFile);
  if (!line) { ev.notes.push('verifier printed no verdict'); return; }
  let verdict;
  try { verdict = JSON.parse(line); } catch { ev.notes.push("verifier's last line is not JSON"); return; }
  if (!verdict || typeof verdict !== 'object' || Array.isArray(verdict)) { ev.notes.push("verifier's verdict is not a JSON object"); return; }
  const score = finiteScore(verdict.score);
  if (score === null) { ev.notes.push("verifier's verdict has no finite numeric score"); return; }
  ev.verification = V.VALID; ev.score = score;
  ev.notes.push(`score ${score}` + (typeof verdict.detail === 'string' && verdict.detail ? ` (${verdict.detail})` : ''));
}

function redact(text, secrets) {
  for (const s of [...secrets].sort((a, b) => b.length - a.length)) text = text.split(s).join('[redacted]');
  return text;
}

/** Remove the work dir (cleanup evidence), collect the artifact files, seal the report. */
async function finishCell(job, ev, dirs, secrets, started) {
  await fsp.rm(dirs.work, { recursive: true, force: true }).catch(() => {});
  await fsp.rm(dirs.tmp, { recursive: true, force: true }).catch(() => {});
  const gone = !fs.existsSync(dirs.work) && !fs.existsSync(dirs.tmp);
  if (!gone) ev.notes.push('work dir could not be removed');
  const files = [], unavailable = [];
  const candidates = ['subject.stdout', 'subject.stderr', 'verifier.stdout', 'verifier.stderr']
    .map((n) => [n, path.join(dirs.artifacts, n)]);
  const walk = (dir, rel) => {
    let entries = [];
    try { entries = fs.readdirSync(dir, { withFileTypes: true }); } catch { return; }
    for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const p = path.join(dir, e.name), name = `${rel}/${e.name}`;
      if (e.isDirectory()) walk(p, name);
      else if (e.isFile()) candidates.push([name, p]);
      else unavailable.push({ name, reason: e.isSymbolicLink() ? 'a symbolic link; links are not followed' : 'not a regular file' });
    }
  };
  walk(dirs.output, 'output');
  for (const [name, p] of candidates) {
    const st = fs.statSync(p, { throwIfNoEntry: false });
    if (!st) continue;
    if (files.length + unavailable.length >= ARTIFACTS_PER_REPORT_MAX) { unavailable.push({ name: 'output/…', reason: 'beyond the limit of artifacts per report' }); break; }
    if (st.size > ARTIFACT_BYTES_MAX) { unavailable.push({ name, reason: `${st.size} bytes exceed the artifact limit of ${ARTIFACT_BYTES_MAX}` }); continue; }
    if (secrets.length) {
      if (st.size > REDACT_FILE_BYTES_MAX) { fs.rmSync(p); unavailable.push({ name, reason: 'too large to scrub of credentials' }); continue; }
      fs.writeFileSync(p, redact(fs.readFileSync(p, 'latin1'), secrets.map((s) => Buffer.from(s).toString('latin1'))), 'latin1');
    }
    const data = await fsp.readFile(p);
    files.push({ name, path: p, digest: 'sha256:' + sha256(data), size: data.length });
  }
  const report = {
    status: 'STATUS_UNSPECIFIED', execution: ev.execution, verification: ev.verification, usage: ev.usage,
    cleanup: gone ? 'CLEANUP_CONFIRMED' : 'CLEANUP_UNKNOWN',
    environment_failure: oneLine(redact(ev.envFailure, secrets), ID_CHARS_MAX),
    started_ms: started, finished_ms: Date.now(), detail: oneLine(redact(ev.notes.join('; '), secrets)),
    artifacts: files.map((f) => ({ name: f.name, digest: f.digest, size_bytes: f.size })), unavailable,
    ...ev.usageFields,
  };
  if (ev.score !== null) report.score = ev.score; // optional: absent means unknown, not 0
  report.status = expectedStatus(report);
  return { report, files, dir: dirs.root };
}

module.exports = { runCell, expectedStatus, oneLine, E, V, ID_CHARS_MAX };
