// The worker's environment identity: what is installed here, measured, and its digest.
//
// Every entry is measured on this machine, never echoed from configuration. The Hello carries
// the runtime entries (`node.*`, `node_worker.source`, `grpc_js.version`, `platform.*`); a run
// offered to this worker names the keys to measure (`measureKeys`), computed exactly as
// worker/identity.py measure_keys does: `bench.file:` a file's sha256, `bench.taskdir:` a
// tree digest, `tool:` the sha256 of the file a command resolves to. Known gap: task dirs are
// digested without .fleetignore/.gitignore rules, so a task dir holding ignored files
// measures differently and the run refuses this worker (never the other way round).
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const ENVIRONMENT_ID_HEX_CHARS = 16;
// The files that decide what this worker does with a cell.
const SOURCE_FILES = ['worker.js', 'executor.js', 'identity.js', 'package-lock.json'];
const sha256 = (data) => crypto.createHash('sha256').update(data).digest('hex');

/** worker/identity.py tree_digest, byte for byte: names, kinds, exec bits and contents of a
 * tree in os.walk order; symlinks by target, never followed; .git and __pycache__ skipped. */
function treeDigest(root) {
  const h = crypto.createHash('sha256');
  const byCodepoint = (a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b));
  const walk = (dir) => {
    const rel = path.relative(root, dir).split(path.sep).join('/') || '.';
    h.update(`D ${rel}\n`);
    let entries;
    try { entries = fs.readdirSync(dir, { withFileTypes: true }); } catch { return; }
    const dirs = [], files = [];
    for (const e of entries) {
      const p = path.join(dir, e.name);
      const isDir = e.isDirectory() || (e.isSymbolicLink() && fs.statSync(p, { throwIfNoEntry: false })?.isDirectory());
      (isDir ? dirs : files).push(e);
    }
    for (const e of files.sort((a, b) => byCodepoint(a.name, b.name))) {
      const p = path.join(dir, e.name);
      const relp = path.relative(root, p).split(path.sep).join('/');
      const st = fs.lstatSync(p);
      if (st.isSymbolicLink()) h.update(`L ${relp}\0${fs.readlinkSync(p)}\n`);
      else if (st.isFile()) h.update(`F ${relp}\0${st.mode & 0o111 ? 'x' : '-'}${sha256(fs.readFileSync(p))}\n`);
    }
    for (const e of dirs.sort((a, b) => byCodepoint(a.name, b.name))) {
      if (e.isSymbolicLink() || e.name === '.git' || e.name === '__pycache__') continue; // os.walk does not follow
      walk(path.join(dir, e.name));
    }
  };
  walk(root);
  return h.digest('hex');
}

function gitRevision(dir) {
  const r = spawnSync('git', ['-C', dir, 'rev-parse', 'HEAD'], { encoding: 'utf8', timeout: 2000 });
  const rev = (r.stdout || '').trim();
  return r.status === 0 && /^[0-9a-f]{40}([0-9a-f]{24})?$/.test(rev) ? rev : '';
}

/** "env-" + the first 16 hex of sha256 over the canonical JSON of the manifest (keys sorted,
 * no spaces; common/spec.py canonical_json), as worker/identity.py environment_id. */
function environmentId(manifest) {
  const sorted = Object.fromEntries(Object.entries(manifest).sort(([a], [b]) => (a < b ? -1 : 1)));
  return 'env-' + sha256(JSON.stringify(sorted)).slice(0, ENVIRONMENT_ID_HEX_CHARS);
}

/** (manifest, id) this worker presents in Hello: the runtime, this worker's own source, and
 * the bench root (its whole tree, and its git revision when it is a checkout). */
function identity(benchRoot) {
  const source = crypto.createHash('sha256');
  for (const f of SOURCE_FILES) source.update(`${f}\0${sha256(fs.readFileSync(path.join(__dirname, f)))}\n`);
  const m = {
    'node.version': process.versions.node,
    'platform.system': os.type(),
    'platform.machine': os.machine(),
    'node_worker.source': source.digest('hex'),
    'grpc_js.version': require('@grpc/grpc-js/package.json').version,
  };
  const manifest = Object.fromEntries(Object.entries(m).sort(([a], [b]) => (a < b ? -1 : 1)));
  return { manifest, environmentId: environmentId(manifest) };
}

/** The cell environment (common/identity.py): platform.*, tool:*, image.*, harbor.*, digested
 * the same way, "cenv-" + 16 hex: what a run with environmentMatch "cell" pins. */
const CELL_PREFIXES = ['platform.', 'tool:', 'image.', 'harbor.'];

const MISSING = 'missing';
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** `root/rel` when it stays inside the root, else null (worker/identity.py _inside). */
function inside(root, rel, resolve) {
  if (!rel || path.isAbsolute(rel)) return null;
  let p = path.join(root, rel);
  let base = root;
  if (resolve) {
    try { p = fs.realpathSync(p); base = fs.realpathSync(root); } catch { return resolve ? null : p; }
  }
  return p !== base && p.startsWith(base + path.sep) ? p : null;
}

function which(cmd, searchPath) {
  const candidates = cmd.includes('/') ? [cmd] : searchPath.split(':').filter(Boolean).map((d) => path.join(d, cmd));
  for (const c of candidates) {
    try {
      const st = fs.statSync(c);
      if (st.isFile()) { fs.accessSync(c, fs.constants.X_OK); return fs.realpathSync(c); }
    } catch { /* not this one */ }
  }
  return '';
}

/** This worker's measurement of the keys a run offers (worker/identity.py measure_keys). */
function measureKeys(keys, benchRoot) {
  const root = path.resolve(benchRoot);
  const out = {};
  for (const key of keys) {
    const i = key.indexOf(':');
    const kind = i < 0 ? key : key.slice(0, i), name = i < 0 ? '' : key.slice(i + 1);
    if (kind === 'bench.file') {
      const p = inside(root, name, true);
      out[key] = p && fs.statSync(p, { throwIfNoEntry: false })?.isFile() ? sha256(fs.readFileSync(p)) : MISSING;
    } else if (kind === 'bench.taskdir') {
      const p = inside(root, name, false);
      out[key] = p && fs.statSync(p, { throwIfNoEntry: false })?.isDirectory() ? treeDigest(p) : MISSING;
    } else if (kind === 'tool') {
      const t = which(name, DEFAULT_PATH);
      out[key] = t ? sha256(fs.readFileSync(t)) : MISSING;
    } else {
      out[key] = 'unknown key';
    }
  }
  return out;
}
function cellEnvironmentId(manifest) {
  const keys = Object.keys(manifest).filter((k) => CELL_PREFIXES.some((p) => k.startsWith(p))).sort();
  const cell = Object.fromEntries(keys.map((k) => [k, manifest[k]]));
  return 'cenv-' + sha256(JSON.stringify(cell)).slice(0, 16);
}

module.exports = { identity, treeDigest, environmentId, cellEnvironmentId, measureKeys, gitRevision };
