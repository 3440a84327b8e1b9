"""Harbor result classification: every kind of trial ending (no result, a kill, a cancel, an
environment or setup failure, a reward with or without the agent's own exception, a reward
beside a provider or sandbox failure, a throttled provider, verifier errors) maps to the
evidence fleet's rules expect, and usage is carried as reported, never invented;
table-driven, on result.json documents shaped like Harbor 0.25.0's."""
from __future__ import annotations

import pytest

from common.evidence import Cleanup, Execution, Report, Status, Usage, Verification, evidence_problem, expected_status
from worker.executor.harbor.classify import PROVIDER_FAILED, PROVIDER_THROTTLED, classify, reward_of, usage_of

T0 = "2026-01-01T00:00:00Z"
E, V, U, C = Execution, Verification, Usage, Cleanup


def result(*, exc: str | None = None, rewards: dict | None = None, agent: bool = True, verifier: bool = True,
           usage: dict | None = None, message: str = "boom") -> dict:
    """A result.json document: which phases started, the first exception, the rewards."""
    doc: dict = {
        "task_name": "hello", "trial_name": "t", "task_checksum": "abc",
        "environment_setup": {"started_at": T0, "finished_at": T0},
        "agent_setup": {"started_at": T0, "finished_at": T0} if agent else None,
        "agent_execution": {"started_at": T0, "finished_at": T0} if agent else None,
        "verifier": {"started_at": T0, "finished_at": T0} if verifier else None,
        "verifier_result": {"rewards": rewards} if rewards is not None else None,
        "agent_result": {"n_input_tokens": None, "n_cache_tokens": None, "n_output_tokens": None,
                         "cost_usd": None, **(usage or {})} if agent else None,
        "exception_info": None,
    }
    if exc:
        doc["exception_info"] = {"exception_type": exc, "exception_message": message,
                                 "exception_traceback": "...", "occurred_at": T0}
    return doc


def status_of(c) -> Status:
    """The status of the report the classification makes; the report must be well formed."""
    report = Report(Status.UNSPECIFIED, c.execution, c.verification, c.usage, c.cleanup, score=c.score,
                    environment_failure=c.environment_failure, throttled=c.throttled,
                    retry_after_ms=c.retry_after_ms)
    status = expected_status(report)
    report = Report(status, c.execution, c.verification, c.usage, c.cleanup, score=c.score,
                    environment_failure=c.environment_failure, throttled=c.throttled,
                    retry_after_ms=c.retry_after_ms)
    assert evidence_problem(report) == "", (evidence_problem(report), c)
    return status


# (name, result doc, runner exit, killed, runner error) -> (execution, verification, cleanup,
# score, environment failure expected?, status)
CASES = [
    ("oracle solves", result(rewards={"reward": 1.0}), 0, False, None,
     (E.COMPLETED, V.VALID, C.CONFIRMED, 1.0, False, Status.COMPLETED)),
    ("nop scores zero", result(rewards={"reward": 0}), 0, False, None,
     (E.COMPLETED, V.VALID, C.CONFIRMED, 0.0, False, Status.COMPLETED)),
    ("agent timeout with a reward is measured", result(exc="AgentTimeoutError", rewards={"reward": 0.0}), 0, False,
     None, (E.SUBJECT_FAILED, V.VALID, C.CONFIRMED, 0.0, False, Status.SUBJECT_FAILED)),
    ("context window exhausted is measured", result(exc="ContextWindowExceededError", rewards={"reward": 1}), 0,
     False, None, (E.SUBJECT_FAILED, V.VALID, C.CONFIRMED, 1.0, False, Status.SUBJECT_FAILED)),
    ("an installed agent's non-zero exit is measured", result(exc="NonZeroAgentExitCodeError", rewards={"reward": 0}),
     0, False, None, (E.SUBJECT_FAILED, V.VALID, C.CONFIRMED, 0.0, False, Status.SUBJECT_FAILED)),
    ("single reward under another name", result(rewards={"accuracy": 0.5}), 0, False, None,
     (E.COMPLETED, V.VALID, C.CONFIRMED, 0.5, False, Status.COMPLETED)),
    ("rate limit beside a reward is throttled, not scored", result(exc="RateLimitError", rewards={"reward": 1.0}), 0,
     False, None, (E.SUBJECT_FAILED, V.NOT_RUN, C.CONFIRMED, None, False, Status.THROTTLED)),
    ("harbor's rate limit is throttled", result(exc="ApiRateLimitError", verifier=False, message="429 slow down"), 0,
     False, None, (E.SUBJECT_FAILED, V.NOT_RUN, C.CONFIRMED, None, False, Status.THROTTLED)),
    ("an overloaded provider is throttled", result(exc="ApiOverloadedError", rewards={"reward": 0.0}), 0, False, None,
     (E.SUBJECT_FAILED, V.NOT_RUN, C.CONFIRMED, None, False, Status.THROTTLED)),
    ("an exhausted usage limit is throttled", result(exc="ApiUsageLimitError", verifier=False), 0, False, None,
     (E.SUBJECT_FAILED, V.NOT_RUN, C.CONFIRMED, None, False, Status.THROTTLED)),
    ("a generic api error that says 429 is throttled",
     result(exc="ApiError", verifier=False, message="HTTP 429 Too Many Requests"), 0, False, None,
     (E.SUBJECT_FAILED, V.NOT_RUN, C.CONFIRMED, None, False, Status.THROTTLED)),
    ("litellm's overloaded_error is throttled",
     result(exc="InternalServerError", verifier=False, message='AnthropicException - {"type":"overloaded_error"}'),
     0, False, None, (E.SUBJECT_FAILED, V.NOT_RUN, C.CONFIRMED, None, False, Status.THROTTLED)),
    ("a throttled provider before the agent ran", result(exc="RateLimitError", agent=False, verifier=False), 0,
     False, None, (E.NOT_STARTED, V.NOT_RUN, C.CONFIRMED, None, False, Status.THROTTLED)),
    ("a rate limit message outside a provider exception is not throttling",
     result(exc="RuntimeError", verifier=False, message="rate limit of the sandbox"), 0, False, None,
     (E.UNKNOWN, V.NOT_RUN, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("a connection error is not throttling", result(exc="ApiConnectionError", rewards={"reward": 1.0}), 0, False, None,
     (E.UNKNOWN, V.NOT_RUN, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("forbidden stays a refusal, not throttling", result(exc="PermissionDeniedError", verifier=False), 0, False, None,
     (E.UNKNOWN, V.NOT_RUN, C.CONFIRMED, None, True, Status.INFRA_FAILED)),
    ("api error beside a reward is not a measurement", result(exc="ApiInternalServerError", rewards={"reward": 0.0}),
     0, False, None, (E.UNKNOWN, V.NOT_RUN, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("network error without a reward", result(exc="NetworkConnectionError", verifier=False), 0, False, None,
     (E.UNKNOWN, V.NOT_RUN, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("sandbox out of memory", result(exc="SandboxLikelyOutOfMemoryError", rewards={"reward": 0.0}), 0, False, None,
     (E.UNKNOWN, V.NOT_RUN, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("verifier timeout", result(exc="VerifierTimeoutError"), 0, False, None,
     (E.COMPLETED, V.INVALID, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("reward file missing", result(exc="RewardFileNotFoundError"), 0, False, None,
     (E.COMPLETED, V.INVALID, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("reward unparseable", result(exc="VerifierOutputParseError"), 0, False, None,
     (E.COMPLETED, V.INVALID, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("agent timeout then a silent verifier failure", result(exc="AgentTimeoutError"), 0, False, None,
     (E.SUBJECT_FAILED, V.INVALID, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("several rewards, none named reward", result(rewards={"a": 1, "b": 0}), 0, False, None,
     (E.COMPLETED, V.INVALID, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("a non-finite reward", result(rewards={"reward": float("nan")}), 0, False, None,
     (E.COMPLETED, V.INVALID, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("environment start timed out", result(exc="EnvironmentStartTimeoutError", agent=False, verifier=False), 0, False,
     None, (E.NOT_STARTED, V.NOT_RUN, C.CONFIRMED, None, False, Status.INFRA_FAILED)),
    ("a Dockerfile step failed", result(exc="NamespaceBuildError", agent=False, verifier=False), 0, False, None,
     (E.NOT_STARTED, V.NOT_RUN, C.CONFIRMED, None, False, Status.INFRA_FAILED)),
    ("agent setup timed out", result(exc="AgentSetupTimeoutError", agent=False, verifier=False), 0, False, None,
     (E.NOT_STARTED, V.NOT_RUN, C.CONFIRMED, None, False, Status.INFRA_FAILED)),
    ("an unknown error before the agent", result(exc="RuntimeError", agent=False, verifier=False), 0, False, None,
     (E.NOT_STARTED, V.NOT_RUN, C.CONFIRMED, None, False, Status.INFRA_FAILED)),
    ("the environment cannot host the task", result(exc="NamespaceEnvironmentUnsupported", agent=False,
                                                    verifier=False), 0, False, None,
     (E.NOT_STARTED, V.NOT_RUN, C.CONFIRMED, None, True, Status.INFRA_FAILED)),
    ("a missing extra is deterministic", result(exc="MissingExtraError", agent=False, verifier=False), 0, False,
     None, (E.NOT_STARTED, V.NOT_RUN, C.CONFIRMED, None, True, Status.INFRA_FAILED)),
    ("bad credentials are this worker's defect", result(exc="AuthenticationError", verifier=False), 0, False, None,
     (E.UNKNOWN, V.NOT_RUN, C.CONFIRMED, None, True, Status.INFRA_FAILED)),
    ("an unknown error during the agent", result(exc="RuntimeError", verifier=False), 0, False, None,
     (E.UNKNOWN, V.NOT_RUN, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("an error after the reward: the stop failed", result(exc="RuntimeError", rewards={"reward": 1}), 0, False, None,
     (E.COMPLETED, V.VALID, C.UNKNOWN, 1.0, False, Status.INDETERMINATE)),
    ("cancelled with a result", result(exc="CancelledError", verifier=False), 130, False, None,
     (E.UNKNOWN, V.NOT_RUN, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("cancelled after the reward is still no result", result(exc="CancelledError", rewards={"reward": 1}), 130,
     False, None, (E.UNKNOWN, V.NOT_RUN, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("killed", None, -9, True, None, (E.UNKNOWN, V.NOT_RUN, C.UNKNOWN, None, False, Status.INDETERMINATE)),
    ("killed even with a result", result(rewards={"reward": 1}), -9, True, None,
     (E.UNKNOWN, V.NOT_RUN, C.UNKNOWN, None, False, Status.INDETERMINATE)),
    ("no result, runner crashed", None, 1, False, None,
     (E.UNKNOWN, V.NOT_RUN, C.UNKNOWN, None, False, Status.INDETERMINATE)),
    ("no result, exit 0", None, 0, False, None, (E.UNKNOWN, V.NOT_RUN, C.UNKNOWN, None, False, Status.INDETERMINATE)),
    ("cancelled before the trial existed", None, 130, False, {"cancelled": True, "stage": "create"},
     (E.UNKNOWN, V.NOT_RUN, C.CONFIRMED, None, False, Status.INDETERMINATE)),
    ("config refused (version, agent, import path)", None, 78, False,
     {"stage": "version", "exceptionType": "HarborVersionMismatch", "message": "harbor 0.24 installed"},
     (E.NOT_STARTED, V.NOT_RUN, C.CONFIRMED, None, True, Status.INFRA_FAILED)),
    ("trial not created, not known deterministic", None, 3, False,
     {"stage": "create", "exceptionType": "OSError", "message": "No space left on device"},
     (E.NOT_STARTED, V.NOT_RUN, C.CONFIRMED, None, False, Status.INFRA_FAILED)),
]


@pytest.mark.parametrize("name, doc, exit_code, killed, runner_error, want", CASES, ids=[c[0] for c in CASES])
def test_classification_table(name, doc, exit_code, killed, runner_error, want):
    c = classify(doc, runner_exit=exit_code, killed=killed, runner_error=runner_error)
    execution, verification, cleanup, score, env_failure, status = want
    assert (c.execution, c.verification, c.cleanup, c.score) == (execution, verification, cleanup, score), c
    assert bool(c.environment_failure) == env_failure, c
    assert len(c.environment_failure) <= 200
    assert c.detail
    assert status_of(c) == status


def test_the_failure_reason_names_the_exception():
    c = classify(result(exc="NamespaceEnvironmentUnsupported", agent=False, verifier=False,
                        message="the task's environment is a compose project"), runner_exit=0, killed=False)
    assert "NamespaceEnvironmentUnsupported" in c.environment_failure and "compose" in c.environment_failure
    c = classify(None, runner_exit=78, killed=False,
                 runner_error={"exceptionType": "ValueError", "message": "Agent name bogus is not valid"})
    assert "bogus" in c.environment_failure


def test_a_step_exception_counts_for_multi_step_trials():
    doc = result(rewards={"reward": 1})
    doc["step_results"] = [{"step_name": "one", "exception_info": {"exception_type": "ApiRateLimitError",
                                                                    "exception_message": "429"}}]
    c = classify(doc, runner_exit=0, killed=False)
    assert status_of(c) == Status.THROTTLED and "ApiRateLimitError" in c.throttled


def test_a_throttled_trial_names_the_provider_error_and_has_no_retry_after():
    c = classify(result(exc="ApiRateLimitError", rewards={"reward": 1.0}, message="429 " + "x" * 400,
                        usage={"n_input_tokens": 10, "n_output_tokens": 2, "cost_usd": 0.5}),
                 runner_exit=0, killed=False)
    assert c.throttled.startswith("provider throttled: ApiRateLimitError: 429 xxx")
    assert len(c.throttled) <= 200 and "\n" not in c.throttled
    assert (c.retry_after_ms, c.score, c.environment_failure) == (0, None, "")
    assert c.usage == U.COMPLETE  # what the agent spent before the refusal is still observed cost
    assert "throttled" in c.detail


def test_every_throttled_type_is_a_provider_failure_and_throttled():
    assert PROVIDER_THROTTLED <= PROVIDER_FAILED
    for etype in sorted(PROVIDER_THROTTLED):
        assert status_of(classify(result(exc=etype, verifier=False), runner_exit=0, killed=False)) == Status.THROTTLED
    for etype in sorted(PROVIDER_FAILED - PROVIDER_THROTTLED):
        c = classify(result(exc=etype, verifier=False), runner_exit=0, killed=False)
        assert c.throttled == "" and status_of(c) == Status.INDETERMINATE, etype


USAGE_CASES = [
    ("nothing reported stays unknown", {}, U.UNKNOWN, {}),
    ("tokens without cost are partial", {"n_input_tokens": 100, "n_output_tokens": 7}, U.PARTIAL,
     {"input_tokens": 100, "output_tokens": 7}),
    ("everything", {"n_input_tokens": 100, "n_cache_tokens": 60, "n_output_tokens": 7, "cost_usd": 0.25},
     U.COMPLETE, {"input_tokens": 100, "cached_tokens": 60, "output_tokens": 7, "cost_usd": 0.25}),
    ("zero is a reported zero", {"n_input_tokens": 0, "n_output_tokens": 0, "cost_usd": 0.0}, U.COMPLETE,
     {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}),
    ("invalid values are dropped, not zeroed", {"n_input_tokens": -1, "n_output_tokens": True, "cost_usd": "1"},
     U.UNKNOWN, {}),
]


@pytest.mark.parametrize("name, agent_result, usage, fields", USAGE_CASES, ids=[c[0] for c in USAGE_CASES])
def test_usage_from_the_agent_result(name, agent_result, usage, fields):
    doc = result(rewards={"reward": 1}, usage=agent_result)
    assert usage_of(doc) == (usage, fields)
    assert classify(doc, runner_exit=0, killed=False).usage == usage


def test_usage_without_any_agent_result_is_unknown():
    assert usage_of(None) == (U.UNKNOWN, {})
    assert usage_of(result(agent=False, verifier=False)) == (U.UNKNOWN, {})


def test_multi_step_usage_is_summed_over_steps():
    doc = result(rewards={"reward": 1})
    doc["agent_result"] = None
    doc["step_results"] = [{"agent_result": {"n_input_tokens": 10, "n_output_tokens": 1, "cost_usd": 0.5}},
                           {"agent_result": {"n_input_tokens": 5, "n_output_tokens": 2}}]
    assert usage_of(doc) == (U.COMPLETE, {"input_tokens": 15, "output_tokens": 3, "cost_usd": 0.5})


def test_reward_selection():
    assert reward_of({"verifier_result": {"rewards": {"reward": 1, "extra": 0}}}) == (1.0, "")
    assert reward_of({"verifier_result": None})[0] is None
    assert reward_of({"verifier_result": {"rewards": {}}})[0] is None
    assert reward_of({"verifier_result": {"rewards": {"reward": "1"}}})[0] is None
