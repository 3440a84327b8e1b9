"""Specs written for the single-host evaluator run on fleet unchanged or are refused with every
unsupported field named at once: the fixtures under tests/fixtures/compat/ and small variants are
converted and compared with the fleet spec they must become, refusals are checked for the full
list of JSON paths, real cells of the converted fixture run through the command executor, and
`fleetctl submit` and `fleetctl local` are driven with the coordinator side replaced by fakes."""
from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path

import pytest

from common.ids import attempt_id_for, cell_id_for
from common.spec import SpecError, parse_spec, parse_spec_text
from tools import fleetctl
from tools.fleetctl import cli
from tools.fleetctl.commands import local as local_command
from tools.fleetctl.compat import LegacySpecError, convert_legacy, is_legacy, load_spec_text, local_args
from worker.executor import CellJob, executor_for

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "compat"
CONVERTS = FIXTURES / "legacy_converts.json"
UNSUPPORTED = FIXTURES / "legacy_unsupported.json"
INTBENCH = ROOT / "tests" / "fixtures" / "intbench"


def legacy() -> dict:
    return json.loads(CONVERTS.read_text())


def refusal(document: dict) -> LegacySpecError:
    with pytest.raises(LegacySpecError) as info:
        convert_legacy(document)
    return info.value


# ---- conversion -----------------------------------------------------------------------------

def test_the_legacy_fixture_converts_to_the_fleet_spec_it_means() -> None:
    doc = legacy()
    converted = convert_legacy(doc)
    run = 'exec sh "$FLEET_BENCH_ROOT/{}" {}"$1"'
    assert converted == {
        "name": "intbench-legacy",
        "benchmark": {"name": "intbench", "version": "1"},
        "executor": {"kind": "command"},
        "execution": {"maxConcurrentTaskGroups": 4},
        "subjects": [
            {"id": "good", "credentials": [], "command": "sh",
             "args": ["-c", run.format("subject.sh", "good "), "subject", "{{task.input}}"]},
            {"id": "bad", "credentials": ["INTBENCH_API_KEY"], "command": "sh",
             "args": ["-c", run.format("subject.sh", "bad "), "subject", "{{task.input}}"]},
        ],
        "tasks": [{"id": "t000", "input": "0"}, {"id": "t001", "input": "1"},
                  {"id": "t002", "input": "2", "metadata": {"difficulty": "easy"}}],
        "repetitions": 2,
        "budget": {"timeoutSeconds": 20},
        "verifier": {"command": "sh", "args": ["-c", run.format("verify.sh", ""), "verifier", "{{task.input}}"],
                     "timeoutSeconds": 10},
    }
    assert doc == legacy(), "the input is not modified"
    spec = parse_spec(converted)
    assert (spec.cell_count, spec.max_concurrent_groups, spec.subject_timeout_ms) == (12, 4, 20_000)
    assert [s.credentials for s in spec.subjects] == [(), ("INTBENCH_API_KEY",)]
    assert load_spec_text(CONVERTS.read_text()) == spec.canonical


def test_the_unsupported_fixture_is_refused_with_every_field_in_one_message() -> None:
    with pytest.raises(LegacySpecError) as info:
        load_spec_text(UNSUPPORTED.read_text())
    e = info.value
    assert e.unsupported == [
        "benchmark.config.repository", "executor.config.mounts", "executor.config.egressProxy",
        "subjects[0].kind", "subjects[0].config.model", "subjects[1].config.args[3]",
        "subjects[1].config.environment.TZ", "subjects[1].config.credentialEnvironment.OPENAI_API_KEY",
        "subjects[1].config.result", "tasks[0].config.harbor", "budget.timeoutMultiplier", "verifier.reward"]
    assert e.missing == ["budget.timeoutSeconds", "verifier.command"]
    message = str(e)
    assert "\n" not in message
    for path in e.unsupported + e.missing:
        assert path in message, path
    assert "{{task.cwd}}" in message and "Runtime Host" in message and "protocol-v1" in message
    assert isinstance(e, SpecError), "callers that catch SpecError catch it too"


def test_only_documents_with_a_schema_version_are_legacy_and_the_rest_pass_through() -> None:
    fleet_text = json.dumps(parse_spec(convert_legacy(legacy())).document())
    assert load_spec_text(fleet_text) is fleet_text
    typo = json.dumps(dict(json.loads(fleet_text), bogusField=1))
    assert load_spec_text(typo) is typo, "the coordinator names a fleet spec's defects, as it always has"
    assert load_spec_text("[1, 2") == "[1, 2"
    assert not is_legacy(json.loads(fleet_text)) and is_legacy(legacy()) and not is_legacy([1])


def test_an_absent_execution_is_the_single_host_default_of_one_group() -> None:
    doc = legacy()
    del doc["execution"]
    assert convert_legacy(doc)["execution"] == {"maxConcurrentTaskGroups": 1}
    doc["execution"] = {"maxConcurrentTaskGroups": 3, "perWorker": 2}
    assert refusal(doc).unsupported == ["execution.perWorker"]


@pytest.mark.parametrize("arg,refused", [
    ("{{task.id}}", False), ("--input={{task.input}}", False), ("{{task.cwd}}/out", True),
    ("{{repetition}}", True), ("{{ task.input }}", True), ("{{bench_root}}/x", True),
])
def test_placeholders_must_mean_the_same_on_both(arg: str, refused: bool) -> None:
    doc = legacy()
    doc["subjects"][0]["config"]["args"] = ["run", arg]
    if refused:
        e = refusal(doc)
        assert e.unsupported == ["subjects[0].config.args[1]"]
        assert arg.split("/")[0].split("=")[-1] in str(e)
    else:
        assert convert_legacy(doc)["subjects"][0]["args"] == ["run", arg]


def test_a_placeholder_in_a_command_is_refused_since_only_fleet_substitutes_there() -> None:
    doc = legacy()
    doc["subjects"][1]["config"]["command"] = "{{task.id}}.sh"
    doc["verifier"]["command"] = "{{task.input}}"
    assert refusal(doc).unsupported == ["subjects[1].config.command", "verifier.command"]


def test_the_result_contract_credentials_and_environment_of_external_subjects() -> None:
    doc = legacy()
    del doc["subjects"][0]["config"]["result"]
    doc["subjects"][1]["config"]["result"] = "protocol-v1"
    doc["subjects"][1]["config"]["environment"] = {"TZ": "Etc/UTC", "LANG": "C"}
    doc["subjects"][1]["config"]["credentialEnvironment"] = {"INTBENCH_API_KEY": "INTBENCH_API_KEY",
                                                             "OTHER": "INTBENCH_API_KEY"}
    e = refusal(doc)
    assert e.unsupported == ["subjects[0].config.result", "subjects[1].config.environment.TZ",
                             "subjects[1].config.environment.LANG", "subjects[1].config.credentialEnvironment.OTHER",
                             "subjects[1].config.result"]
    assert '"exit-code"' in e.reasons["subjects[0].config.result"], "the refusal says what would convert"


def test_maka_subjects_and_executors_fleet_does_not_run_are_refused() -> None:
    doc = legacy()
    doc["executor"] = {"kind": "pier", "config": {"frameworkVersion": "1"}}
    doc["subjects"][0] = {"id": "maka", "kind": "maka", "credentials": [], "config": {}}
    e = refusal(doc)
    assert e.unsupported[:3] == ["executor.kind", "executor.config.frameworkVersion", "subjects[0].kind"]
    assert "pier" in e.reasons["executor.kind"]


def test_a_harbor_spec_converts_where_its_fields_are_fleets() -> None:
    with_input = {"schemaVersion": "maka.eval.v1", "id": "tb", "benchmark": {"id": "terminal-bench", "version": "2.1"},
           "executor": {"kind": "harbor", "config": {"frameworkVersion": "0.20.0"}},
           "subjects": [{"id": "oracle", "kind": "external", "credentials": [], "config": {"agent": "oracle"}}],
           "tasks": [{"id": "hello", "input": "Say hello.", "config": {"harbor": {"path": "tasks/hello"}}}],
           "repetitions": 1, "budget": {"timeoutSeconds": 600}, "verifier": {"timeoutSeconds": 120}}
    # Fleet's Harbor tasks take their instruction from the task directory: a separate input is refused.
    assert refusal(with_input).unsupported == ["tasks[0].input"]
    doc = copy.deepcopy(with_input)
    del doc["tasks"][0]["input"]
    converted = convert_legacy(doc)
    assert converted["executor"] == {"kind": "harbor", "harborVersion": "0.20.0"}
    assert converted["tasks"] == [{"id": "hello", "path": "tasks/hello"}]
    assert converted["subjects"] == [{"id": "oracle", "credentials": [], "agent": "oracle"}]
    assert parse_spec(converted).executor_kind == "harbor"
    relay = copy.deepcopy(doc)
    relay["subjects"][0]["config"] = {"command": "node", "args": ["wrapper.js"]}
    assert refusal(relay).unsupported == ["subjects[0].config.command", "subjects[0].config.args"]


def test_a_wrong_schema_version_and_unknown_top_level_fields_are_named() -> None:
    doc = legacy()
    doc["schemaVersion"] = "maka.eval.v2"
    doc["notes"] = "hi"
    e = refusal(doc)
    assert e.unsupported == ["schemaVersion", "notes"]


def test_a_converted_spec_that_breaks_a_fleet_rule_says_it_was_converted() -> None:
    doc = legacy()
    doc["tasks"][1]["id"] = "t000"
    with pytest.raises(SpecError, match=r"tasks\[1\]\.id: duplicate task id .*converted from this maka.eval.v1"):
        load_spec_text(json.dumps(doc))


# ---- the converted cells really run ---------------------------------------------------------

def test_cells_of_the_converted_fixture_run_through_the_command_executor(tmp_path: Path) -> None:
    spec = parse_spec_text(load_spec_text(CONVERTS.read_text()))
    doc = spec.document()

    def job(subject: dict, task: dict) -> CellJob:
        cell = cell_id_for(task["id"], 1, subject["id"])
        return CellJob(run_id="run-compat", assignment_id=f"run-compat:{task['id']}/r1:g1",
                       attempt_id=attempt_id_for("run-compat", cell, 1), cell_id=cell, task_id=task["id"],
                       repetition=1, subject_id=subject["id"], task=task, subject=subject, verifier=doc["verifier"],
                       executor=doc["executor"], subject_timeout_s=spec.subject_timeout_ms // 1000,
                       bench_root=INTBENCH, work_root=tmp_path / subject["id"] / task["id"],
                       credentials={name: "not-a-secret" for name in subject.get("credentials", [])})

    jobs = [job(s, t) for s in doc["subjects"] for t in doc["tasks"][:2]]

    async def go():
        executor = executor_for("command")
        return await asyncio.gather(*(executor.run(j, asyncio.Event()) for j in jobs))

    scores = {(j.subject_id, j.task_id): o.report.score for j, o in zip(jobs, asyncio.run(go()))}
    # intbench: "bad" answers wrong when the input is a multiple of 3.
    assert scores == {("good", "t000"): 1.0, ("good", "t001"): 1.0, ("bad", "t000"): 0.0, ("bad", "t001"): 1.0}


# ---- fleetctl submit and local --------------------------------------------------------------

class FakeAdmin:
    submitted: list = []

    def __init__(self, address: str, token: str, *tls: object) -> None:
        pass

    def call(self, name: str, request: object, timeout: float | None = None) -> object:
        assert name == "SubmitRun"
        FakeAdmin.submitted.append(request)
        from common.fleetpb import admin_pb2
        return admin_pb2.SubmitRunResponse(run_id="run-fake", created=True)

    def close(self) -> None:
        pass


@pytest.fixture
def fake_admin(monkeypatch, tmp_path: Path) -> Path:
    FakeAdmin.submitted = []
    monkeypatch.setattr(cli, "Admin", FakeAdmin)
    token = tmp_path / "admin.token"
    token.write_text("t")
    return token


def test_fleetctl_submit_sends_the_conversion_of_a_legacy_spec(fake_admin: Path, capsys) -> None:
    assert fleetctl.main(["--token-file", str(fake_admin), "submit", str(CONVERTS)]) == 0
    (request,) = FakeAdmin.submitted
    assert request.spec_json == parse_spec(convert_legacy(legacy())).canonical
    out = capsys.readouterr()
    assert out.out.strip() == "run-fake" and "single-host evaluator spec" in out.err


def test_fleetctl_submit_refuses_an_unconvertible_spec_in_one_line_naming_every_field(fake_admin: Path,
                                                                                      capsys) -> None:
    assert fleetctl.main(["--token-file", str(fake_admin), "submit", str(UNSUPPORTED)]) == 1
    assert FakeAdmin.submitted == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fleetctl: ")
    for path in ("executor.config.mounts", "subjects[0].kind", "verifier.reward", "budget.timeoutSeconds"):
        assert path in err


def test_fleetctl_submit_leaves_a_fleet_spec_untouched(fake_admin: Path, tmp_path: Path) -> None:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(convert_legacy(legacy()), indent=2))
    assert fleetctl.main(["--token-file", str(fake_admin), "submit", str(path)]) == 0
    assert FakeAdmin.submitted[0].spec_json == path.read_text()


def test_fleetctl_local_runs_the_conversion_with_the_original_bench_root_and_policy(monkeypatch,
                                                                                    tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    bench.mkdir()
    spec = bench / "experiment.json"
    spec.write_text(CONVERTS.read_text())
    (bench / "policy.json").write_text("{}")
    seen = {}

    def fake_run_local(spec_path, workers, slots, data, bench_root, policy, html=None, order_from="", **_kw):
        seen.update(spec=spec_path, bench_root=bench_root, policy=policy, data=data)
        return 0

    monkeypatch.setattr(local_command, "run_local", fake_run_local)
    data = tmp_path / "data"
    assert fleetctl.main(["local", str(spec), "--data-dir", str(data)]) == 0
    assert seen["spec"] == data.resolve() / "converted-spec.json"
    assert (seen["bench_root"], seen["policy"]) == (bench.resolve(), bench.resolve() / "policy.json")
    assert parse_spec_text(seen["spec"].read_text()).canonical == load_spec_text(CONVERTS.read_text())
    # A fleet spec goes to run_local exactly as given.
    fleet = tmp_path / "fleet.json"
    fleet.write_text(load_spec_text(CONVERTS.read_text()))
    assert local_args(fleet, None, None, None) == (fleet, None, None)
    assert fleetctl.main(["local", str(UNSUPPORTED), "--data-dir", str(data)]) == 1
