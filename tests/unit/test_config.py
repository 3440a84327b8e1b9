"""Both daemons' configuration: TOML files checked key by key (unknown keys, types, ranges,
syntax, each refused with file, line and reason), flags over file over environment over
defaults, `--print-config` round-trips without printing a secret, and the settings tables
agree with docs/configuration.md; driven through the real parsers and, for exit codes, the
real entry points as subprocesses."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from common.tomlconfig import ConfigFileError, load_file, markdown_table
from coordinator import config as cc
from worker import config as wc

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "tests" / "fixtures" / "intbench"
DOCS = REPO / "docs" / "configuration.md"
PID = 4242


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def coordinator(argv: list[str], environ: dict[str, str] | None = None) -> cc.Config:
    return cc.parse(argv, environ or {}, PID)[0]


def worker_argv(tmp_path: Path, *extra: str) -> list[str]:
    token = tmp_path / "enroll.token"
    if not token.exists():
        token.write_text("enroll-secret-value\n")
    return ["--coordinator", "127.0.0.1:7443", "--token-file", str(token), "--worker-id", "w1", "--slots", "2",
            "--state-dir", str(tmp_path / "state"), "--bench-root", str(BENCH), *extra]


def worker(argv: list[str], environ: dict[str, str] | None = None) -> wc.WorkerConfig:
    return wc.parse_worker_args(argv, environ or {}, PID)[0]


# ---- files ---------------------------------------------------------------------------------------

def test_the_file_sets_values_and_flags_override_it(tmp_path: Path) -> None:
    f = write(tmp_path / "c.toml", 'data_dir = "/srv/fleet"\ntick_ms = 50\nlog_level = "debug"\nsnapshot_every = 7\n')
    cfg = coordinator(["--config", str(f)])
    assert (cfg.data_dir, cfg.tick_ms, cfg.log_level, cfg.snapshot_every) == (Path("/srv/fleet"), 50, "debug", 7)
    assert cfg.listen == "127.0.0.1:7443" and cfg.metrics_listen == "" and cfg.insecure is False
    cfg = coordinator(["--config", str(f), "--tick-ms", "75", "--data-dir", str(tmp_path / "d")])
    assert (cfg.tick_ms, cfg.data_dir, cfg.log_level) == (75, tmp_path / "d", "debug")


def test_a_relative_path_in_a_file_is_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    f = write(tmp_path / "etc" / "c.toml", 'data_dir = "../state"\n')
    assert coordinator(["--config", str(f)]).data_dir.resolve() == (tmp_path / "state").resolve()


@pytest.mark.parametrize(("text", "line", "key", "reason"), [
    ('tick_ms = 100\nlisten2 = "x"\n', 2, "listen2", "unknown key: fleet-coordinator has no setting 'listen2' "
                                                     "(did you mean 'listen'?)"),
    ('[tls]\ncert = "a"\n', 1, "tls", "unknown table"),
    ('tick_ms = "100"\n', 1, "tick_ms", "must be an integer, got \"100\""),
    ("\n\ninsecure = 1\n", 3, "insecure", "must be true or false"),
    ("snapshot_every = true\n", 1, "snapshot_every", "must be an integer, got true"),
    ("tick_ms = 0\n", 1, "tick_ms", "must be at least 1, got 0"),
    ('log_level = "loud"\n', 1, "log_level", "must be one of debug, info, warning, error"),
    ('data_dir = ""\n', 1, "data_dir", "must be a path, got an empty string"),
    ("listen = [1, 2]\n", 1, "listen", "must be a string, got an array"),
])
def test_a_bad_key_is_refused_with_file_line_key_and_reason(tmp_path: Path, text: str, line: int, key: str,
                                                            reason: str) -> None:
    f = write(tmp_path / "c.toml", text)
    with pytest.raises(ConfigFileError) as e:
        coordinator(["--config", str(f), "--data-dir", str(tmp_path)])
    assert (e.value.file, e.value.line, e.value.key) == (str(f), line, key)
    assert reason in e.value.reason
    assert str(e.value).startswith(f"{f}:{line}: key '{key}': ")


def test_a_toml_syntax_error_names_the_line_and_column(tmp_path: Path) -> None:
    f = write(tmp_path / "w.toml", 'coordinator = "127.0.0.1:7443"\nslots = 2\nworker_id = w1\n')
    with pytest.raises(ConfigFileError) as e:
        worker(["--config", str(f)])
    assert e.value.file == str(f) and e.value.line == 3
    assert str(e.value).startswith(f"{f}:3: TOML syntax error: ") and "column" in str(e.value)


def test_an_unreadable_or_non_utf8_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match=r"absent\.toml: cannot read the configuration file"):
        coordinator(["--config", str(tmp_path / "absent.toml")])
    f = tmp_path / "latin1.toml"
    f.write_bytes(b'log_level = "info"\n# caf\xe9\n')
    with pytest.raises(ConfigFileError) as e:
        coordinator(["--config", str(f)])
    assert e.value.line == 2 and "UTF-8" in e.value.reason


def test_settings_that_do_not_fit_together_name_where_they_came_from(tmp_path: Path) -> None:
    cert = write(tmp_path / "cert.pem", "x")
    f = write(tmp_path / "c.toml", f'data_dir = "{tmp_path}"\n\ntls_cert = "{cert}"\n')
    with pytest.raises(ConfigFileError) as e:
        coordinator(["--config", str(f)])
    assert (e.value.line, e.value.key) == (3, "tls_cert") and "tls_cert and tls_key go together" in e.value.reason
    f = write(tmp_path / "c.toml", f'data_dir = "{tmp_path}"\nlisten = "0.0.0.0:7443"\n')
    with pytest.raises(ConfigFileError) as e:
        coordinator(["--config", str(f)])
    assert (e.value.line, e.value.key) == (2, "listen") and "refusing plaintext" in e.value.reason
    assert coordinator(["--config", str(f), "--insecure"]).insecure
    with pytest.raises(ConfigFileError) as e:
        coordinator(["--config", str(f), "--tls-client-ca", str(cert)])
    assert (e.value.key, e.value.flag) == ("tls_client_ca", "--tls-client-ca") and "need TLS" in e.value.reason
    assert str(e.value).startswith("flag --tls-client-ca: ")
    with pytest.raises(ConfigFileError, match="^flag --tls-key: .*nokey is not a readable file"):
        coordinator(["--config", str(f), "--tls-cert", str(cert), "--tls-key", str(tmp_path / "nokey")])


def test_a_missing_required_setting_names_its_key_and_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match=r"missing required setting: data_dir \(--data-dir\)"):
        coordinator([])
    f = write(tmp_path / "w.toml", 'coordinator = "127.0.0.1:7443"\nslots = 1\n')
    with pytest.raises(ConfigFileError) as e:
        worker(["--config", str(f)])
    for key in ("token_file (--token-file)", "worker_id (--worker-id)", "state_dir (--state-dir)",
                "bench_root (--bench-root)"):
        assert key in str(e.value)
    assert "coordinator (" not in str(e.value) and "slots (" not in str(e.value)


def test_the_worker_file_is_checked_like_the_coordinators(tmp_path: Path) -> None:
    for text, key, reason in (('slots = 0\n', "slots", "at least 1"), ("slots = 100000\n", "slots", "at most"),
                              ('coordinater = "x"\n', "coordinater", "did you mean 'coordinator'"),
                              ('drain_timeout_s = -1\n', "drain_timeout_s", "at least 0")):
        f = write(tmp_path / "w.toml", text)
        with pytest.raises(ConfigFileError) as e:
            worker(["--config", str(f), *worker_argv(tmp_path)])
        assert e.value.key == key and reason in e.value.reason, e.value
    f = write(tmp_path / "w.toml", 'coordinator = "10.0.0.5:7443"\n')
    with pytest.raises(ConfigFileError) as e:
        worker(worker_argv(tmp_path)[2:] + ["--config", str(f)])
    assert (e.value.line, e.value.key) == (1, "coordinator") and "loopback" in e.value.reason


def test_worker_file_flags_and_tls_pairs(tmp_path: Path) -> None:
    ca = write(tmp_path / "ca.pem", "x")
    cert = write(tmp_path / "w1.pem", "x")
    key = write(tmp_path / "w1.key", "x")
    f = write(tmp_path / "w.toml", 'slots = 3\nlog_level = "warning"\ntls_ca = "ca.pem"\ncpu_millis = 1500\n'
                                   'coordinator = "coord.example:7443"\n')
    cfg = worker(["--config", str(f), *worker_argv(tmp_path)[2:], "--slots", "4"])
    assert (cfg.slots, cfg.log_level, cfg.tls_ca, cfg.cpu_millis) == (4, "warning", ca, 1500)
    assert cfg.coordinator == "coord.example:7443" and not cfg.plaintext and cfg.tls_cert is None
    cfg = worker(["--config", str(f), *worker_argv(tmp_path)[2:], "--tls-cert", str(cert), "--tls-key", str(key)])
    assert (cfg.tls_cert, cfg.tls_key) == (cert, key)
    with pytest.raises(ConfigFileError, match="tls_cert and tls_key go together"):
        worker(["--config", str(f), *worker_argv(tmp_path)[2:], "--tls-cert", str(cert)])
    with pytest.raises(ConfigFileError, match="sent over TLS only"):
        worker(worker_argv(tmp_path, "--tls-cert", str(cert), "--tls-key", str(key)))


# ---- environment -----------------------------------------------------------------------------------

def test_systemd_directories_are_defaults_the_file_and_flags_override(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    write(creds / "admin.token", "admin-secret\n")
    env = {"STATE_DIRECTORY": str(tmp_path / "state"), "CREDENTIALS_DIRECTORY": str(creds)}
    cfg = coordinator([], env)
    assert cfg.data_dir == tmp_path / "state"
    assert cfg.admin_token_file == creds / "admin.token" and cfg.enroll_token_file is None
    assert cfg.enroll_token_path == tmp_path / "state" / "enroll.token"
    f = write(tmp_path / "c.toml", f'data_dir = "{tmp_path / "other"}"\n')
    assert coordinator(["--config", str(f)], env).data_dir == tmp_path / "other"
    assert coordinator(["--config", str(f), "--data-dir", "/x"], env).data_dir == Path("/x")
    write(creds / "enroll.token", "enroll-secret\n")
    argv = [a for a in worker_argv(tmp_path) if a not in ("--token-file", str(tmp_path / "enroll.token"),
                                                          "--state-dir", str(tmp_path / "state"))]
    w = worker(argv, env)
    assert w.token_file == creds / "enroll.token" and w.state_dir == tmp_path / "state"


def test_notify_settings_come_from_the_environment_only(tmp_path: Path) -> None:
    env = {"NOTIFY_SOCKET": "@n", "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(PID)}
    assert coordinator(["--data-dir", str(tmp_path)], env).notify.watchdog_usec == 2_000_000
    assert worker(worker_argv(tmp_path), env).notify.socket == "@n"
    assert coordinator(["--data-dir", str(tmp_path)], {**env, "WATCHDOG_PID": "1"}).notify.watchdog_usec == 0
    f = write(tmp_path / "c.toml", 'notify_socket = "/x"\n')
    with pytest.raises(ConfigFileError, match="unknown key"):
        coordinator(["--config", str(f), "--data-dir", str(tmp_path)])


# ---- --print-config --------------------------------------------------------------------------------

def test_print_config_round_trips_for_the_coordinator(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    write(creds / "admin.token", "admin-secret-value\n")
    f = write(tmp_path / "c.toml", 'tick_ms = 123\nmetrics_listen = "127.0.0.1:0"\n')
    env = {"STATE_DIRECTORY": str(tmp_path / "state"), "CREDENTIALS_DIRECTORY": str(creds)}
    cfg, resolved, show = cc.parse(["--config", str(f), "--print-config", "--log-level", "error"], env, PID)
    assert show
    text = cc.print_config(cfg, resolved)
    assert "admin-secret-value" not in text
    assert re.search(r'^tick_ms = 123  # from .*c\.toml:1$', text, re.M), text
    assert '# enroll_token_file is unset: ' + str(tmp_path / "state" / "enroll.token") in text
    data = tomllib.loads(text)
    assert data["admin_token_file"] == str(creds / "admin.token") and "enroll_token_file" not in data
    again = coordinator(["--config", str(write(tmp_path / "printed.toml", text))])
    assert again == cfg


def test_print_config_round_trips_for_the_worker_without_its_environment(tmp_path: Path) -> None:
    environ = {"OPENAI_API_KEY": "sk-very-secret"}
    cfg, resolved, show = wc.parse_worker_args(worker_argv(tmp_path, "--print-config", "--drain-timeout-s", "9"),
                                               environ, PID)
    assert show
    text = wc.print_config(cfg, resolved)
    assert "sk-very-secret" not in text and "enroll-secret-value" not in text
    assert tomllib.loads(text)["drain_timeout_s"] == 9
    again = worker(["--config", str(write(tmp_path / "printed.toml", text))], environ)
    assert again == cfg


def test_the_entry_points_exit_2_on_a_bad_file_and_0_on_print_config(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for module, text in (("coordinator.main", 'data_dir = "d"\nlisten = "127.0.0.1:0"\nlisten_port = 3\n'),
                         ("worker.main", 'slots = 2\nworker_id = "w1"\nlisten_port = 3\n')):
        bad = write(tmp_path / "bad.toml", text)
        done = subprocess.run([sys.executable, "-m", module, "--config", str(bad)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert f"{bad}:3: key 'listen_port': unknown key" in done.stderr, done.stderr
    shown = subprocess.run([sys.executable, "-m", "coordinator.main", "--data-dir", str(tmp_path / "d"),
                            "--print-config"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert tomllib.loads(shown.stdout)["data_dir"] == str(tmp_path / "d")
    assert not (tmp_path / "d").exists(), "--print-config changes nothing"
    shown = subprocess.run([sys.executable, "-m", "worker.main", *worker_argv(tmp_path), "--print-config"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert tomllib.loads(shown.stdout)["worker_id"] == "w1" and "enroll-secret-value" not in shown.stdout


# ---- the tables --------------------------------------------------------------------------------------

def docs_section(name: str) -> str:
    text = DOCS.read_text()
    m = re.search(rf"<!-- BEGIN {name} keys -->\n(.*?)<!-- END {name} keys -->", text, re.S)
    assert m, f"docs/configuration.md lacks the {name} section markers"
    return m.group(1)


@pytest.mark.parametrize(("name", "settings"), [("coordinator", cc.SETTINGS), ("worker", wc.SETTINGS)])
def test_the_docs_table_is_the_settings_table(name: str, settings: tuple) -> None:
    want = markdown_table(settings)
    assert docs_section(name) == want, f"docs/configuration.md's {name} table is stale; it should read:\n{want}"
    keys = [s.key for s in settings]
    assert "metrics_listen" in keys and len(keys) == len(set(keys))
    assert all(s.help.endswith(".") for s in settings), "each meaning is a sentence"


def test_every_config_field_is_a_setting_or_comes_from_the_environment() -> None:
    env_only = {"notify", "environ"}
    for config_type, settings in ((cc.Config, cc.SETTINGS), (wc.WorkerConfig, wc.SETTINGS)):
        fields = set(config_type.__dataclass_fields__)
        assert fields - env_only == {s.key for s in settings}, config_type.__name__


def test_the_example_files_hold_only_known_keys() -> None:
    for name, settings, program in (("coordinator.toml", cc.SETTINGS, "fleet-coordinator"),
                                    ("worker.toml", wc.SETTINGS, "fleet-worker")):
        layer = load_file(REPO / "tools" / "systemd" / name, settings, program=program)
        assert layer.values, name


def test_the_drift_check_fails_on_a_changed_table() -> None:
    changed = cc.SETTINGS[:-1]
    assert markdown_table(changed) != docs_section("coordinator")
