"""What one Harbor trial's result.json means as fleet evidence: a pure function of the parsed
result, the runner's exit code and whether the runner had to be killed.

The exception names are Harbor 0.25.0's (`harbor.models.trial.error_policy.ERROR_POLICIES`,
keyed by `ExceptionInfo.exception_type`), regrouped by what they mean for a fleet cell:

- no result, a kill or a cancellation: nothing is known; retry (execution UNKNOWN).
- the agent never started (`agent_execution` unset: environment start, build or agent
  setup failed): NOT_STARTED, an infrastructure failure; a deterministic environment
  failure reason only for defects every retry meets again (Harbor's HARBOR_FAILED group,
  an environment that cannot host the task, a configuration the runner refused).
- a reward with no exception: COMPLETED and measured; with an exception of the agent's own
  (timeout, exhausted context, refusal, non-zero exit of an installed agent):
  SUBJECT_FAILED and measured. Verification VALID, the reward is the score.
- the model provider throttled the agent (a rate limit, a usage limit, an overload: by
  exception type, or a provider exception whose message says 429, 529, rate limit,
  overloaded or too many requests): throttled, never scored (the reward discarded), retried by the coordinator
  after the Retry-After without counting as an attempt. Harbor records no Retry-After, so
  it is 0 (the coordinator's default).
- a reward next to another model-provider, network or sandbox error: not a
  measurement; retry (execution UNKNOWN, the reward discarded). An authentication or
  model-not-found refusal is this worker's configuration: a deterministic environment
  failure.
- a verifier error (timeout, missing, empty or unparseable reward): verification INVALID;
  retried, bounded by the coordinator.

Harbor treats a non-zero exit of an installed agent as "unclassified, retry"; fleet keeps
its command executor's rule instead: a subject that ran and failed is a measured failure.
Cleanup here is CONFIRMED unless the runner was killed or an exception came after the
reward (the environment's stop); the executor downgrades it when its own checks fail.
Usage is the agent's reported tokens and cost; what was not reported stays unknown.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping, NamedTuple

from common.evidence import Cleanup, Execution, Usage, Verification
from common.limits import ID_CHARS_MAX
from worker.executor.base import TOKENS_MAX, one_line, score_of

# The runner's exit codes (runner.py).
RUNNER_OK = 0
RUNNER_NOT_CREATED = 3
RUNNER_CONFIG = 78
RUNNER_CANCELLED = 130

# The agent ended the trial itself: its reward is a measurement of the subject.
AGENT_ENDED = frozenset({
    "AgentTimeoutError", "ContextWindowExceededError", "OutputTokenExceededError",
    "ContextLengthExceededError", "OutputLengthExceededError",
    "AgentSafetyRefusalError", "ContentPolicyViolationError",
    "NonZeroAgentExitCodeError",
})
# The model provider or the network failed the agent: whatever was graded is not a measurement.
PROVIDER_FAILED = frozenset({
    "ApiError", "ApiRateLimitError", "ApiInternalServerError", "ApiOverloadedError",
    "ApiConnectionClosedError", "ApiResponseStalledError", "UnknownApiError",
    "NetworkConnectionError", "ApiConnectionError", "ApiUsageLimitError", "RateLimitError",
    "InternalServerError", "ServiceUnavailableError", "APIConnectionError", "APIError", "Timeout",
    "BadRequestError", "UnprocessableEntityError", "UnsupportedParamsError",
    "APIResponseValidationError", "BudgetExceededError",
})
# Of those, the provider refusing for now (a rate limit, an account's usage limit, an
# overload): throttled, retried after the provider's wait, never counted as an attempt.
PROVIDER_THROTTLED = frozenset({
    "ApiRateLimitError", "ApiOverloadedError", "RateLimitError", "ApiUsageLimitError",
})
assert PROVIDER_THROTTLED <= PROVIDER_FAILED
# A generic provider exception whose message says it was throttled: Harbor's agents wrap
# some as ApiError or UnknownApiError, and litellm reports Anthropic's 529 "overloaded_error"
# as an InternalServerError.
THROTTLED_MESSAGE = re.compile(r"\b429\b|\b529\b|rate[ _-]?limit|overloaded|too many requests", re.IGNORECASE)
# The provider refused this worker's credentials or model: every cell would fail alike.
PROVIDER_REFUSED = frozenset({
    "AgentAuthenticationError", "ModelNotFoundError", "ApiProviderResourceNotFoundError",
    "AuthenticationError", "PermissionDeniedError", "NotFoundError",
})
# The sandbox failed (start, build, setup, health, memory, transport).
SANDBOX_FAILED = frozenset({
    "EnvironmentStartTimeoutError", "SandboxBuildFailedError", "AgentSetupTimeoutError",
    "HealthcheckError", "SandboxLikelyOutOfMemoryError", "MemoryLimitExceededError",
    "SSHAccessError", "GKEExecStreamClosedError", "GKEPodNotFoundError", "RuntimeRequestError",
    "NamespaceBuildError",
})
# The verifier could not judge.
VERIFIER_FAILED = frozenset({
    "VerifierTimeoutError", "RewardFileNotFoundError", "RewardFileEmptyError",
    "VerifierOutputParseError", "AddTestsDirError", "DownloadVerifierDirError",
})
# Harbor or the environment cannot run this configuration at all.
DETERMINISTIC = frozenset({
    "ServiceOperationsUnsupportedError", "VercelScopeError", "DspyImportError",
    "MissingExtraError", "RegradeError", "NamespaceEnvironmentUnsupported",
})
CANCELLED = "CancelledError"
MESSAGE_CHARS_MAX = 120


class Classified(NamedTuple):
    execution: Execution
    verification: Verification
    usage: Usage
    cleanup: Cleanup
    score: float | None
    environment_failure: str
    detail: str
    throttled: str = ""  # the provider throttled the agent: what it said (Report.throttled)
    retry_after_ms: int = 0  # Harbor's result carries none


def _exception(result: Mapping) -> tuple[str, str]:
    """(type, message) of the trial's first recorded exception, or ("", "")."""
    infos = [result.get("exception_info")]
    infos += [s.get("exception_info") for s in result.get("step_results") or () if isinstance(s, Mapping)]
    for info in infos:
        if isinstance(info, Mapping) and info.get("exception_type"):
            message = one_line(str(info.get("exception_message") or ""), MESSAGE_CHARS_MAX)
            return str(info["exception_type"]), message
    return "", ""


def _started(result: Mapping, phase: str) -> bool:
    timing = result.get(phase)
    if isinstance(timing, Mapping) and timing.get("started_at"):
        return True
    return any(isinstance(s, Mapping) and isinstance(s.get(phase), Mapping) and s[phase].get("started_at")
               for s in result.get("step_results") or ())


def reward_of(result: Mapping) -> tuple[float | None, str]:
    """(score, problem): the reward named "reward", or the only one; else why there is none."""
    verifier = result.get("verifier_result")
    rewards = verifier.get("rewards") if isinstance(verifier, Mapping) else None
    if not isinstance(rewards, Mapping) or not rewards:
        return None, "no reward"
    if "reward" in rewards:
        value = rewards["reward"]
    elif len(rewards) == 1:
        value = next(iter(rewards.values()))
    else:
        return None, f"{len(rewards)} rewards and none named 'reward'"
    score = score_of(value)
    if score is None:
        return None, f"reward {value!r} is not a finite number"
    return score, ""


def usage_of(result: Mapping | None) -> tuple[Usage, dict[str, Any]]:
    """The agent's reported usage: (Usage, Report fields). Harbor's n_input_tokens includes
    the cached ones (n_cache_tokens); they are carried as they are. Nothing reported is
    UNKNOWN, some of tokens and cost PARTIAL, all of input, output and cost COMPLETE."""
    if not isinstance(result, Mapping):
        return Usage.UNKNOWN, {}
    contexts: list[Mapping] = []
    if isinstance(result.get("agent_result"), Mapping):
        contexts = [result["agent_result"]]
    else:
        contexts = [s["agent_result"] for s in result.get("step_results") or ()
                    if isinstance(s, Mapping) and isinstance(s.get("agent_result"), Mapping)]
    fields: dict[str, Any] = {}
    for ctx in contexts:
        for key, attr in (("n_input_tokens", "input_tokens"), ("n_cache_tokens", "cached_tokens"),
                          ("n_output_tokens", "output_tokens")):
            v = ctx.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= TOKENS_MAX:
                fields[attr] = min(fields.get(attr, 0) + v, TOKENS_MAX)
        c = ctx.get("cost_usd")
        if isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c >= 0:
            fields["cost_usd"] = fields.get("cost_usd", 0.0) + float(c)
    if all(k in fields for k in ("input_tokens", "output_tokens", "cost_usd")):
        return Usage.COMPLETE, fields
    return (Usage.PARTIAL if fields else Usage.UNKNOWN), fields


def classify(result_json: Mapping | None, *, runner_exit: int | None, killed: bool,
             runner_error: Mapping | None = None) -> Classified:
    """The evidence of one trial. `runner_error` is the runner's outFile document when it
    reported a failure before the trial ran ({"stage", "exceptionType", "message",
    "deterministic"})."""
    err = runner_error if isinstance(runner_error, Mapping) else {}
    if killed:
        return Classified(Execution.UNKNOWN, Verification.NOT_RUN, Usage.UNKNOWN, Cleanup.UNKNOWN, None, "",
                          "runner killed: what the trial did and whether its environment stopped is unknown")
    if not isinstance(result_json, Mapping):
        said = one_line(f"{err.get('exceptionType', '')}: {err.get('message', '')}", MESSAGE_CHARS_MAX) \
            if err.get("exceptionType") else ""
        if runner_exit == RUNNER_CONFIG:
            reason = one_line("harbor: " + (said or "the runner refused the configuration"), 200)
            return Classified(Execution.NOT_STARTED, Verification.NOT_RUN, Usage.UNKNOWN, Cleanup.CONFIRMED, None,
                              reason, "trial not created (deterministic)")
        if runner_exit == RUNNER_NOT_CREATED:
            return Classified(Execution.NOT_STARTED, Verification.NOT_RUN, Usage.UNKNOWN, Cleanup.CONFIRMED, None,
                              "", f"trial not created: {said or 'no reason given'}")
        if runner_exit == RUNNER_CANCELLED and err.get("stage") == "create":
            return Classified(Execution.UNKNOWN, Verification.NOT_RUN, Usage.UNKNOWN, Cleanup.CONFIRMED, None,
                              "", "cancelled before the trial started")
        return Classified(Execution.UNKNOWN, Verification.NOT_RUN, Usage.UNKNOWN, Cleanup.UNKNOWN, None, "",
                          f"no result.json (runner exit {runner_exit})")

    result = result_json
    usage, _ = usage_of(result)
    etype, message = _exception(result)
    said = f"{etype}: {message}" if message else etype
    agent_started = _started(result, "agent_execution")
    verifier_started = _started(result, "verifier")
    score, problem = reward_of(result)

    def out(execution: Execution, verification: Verification, detail: str, *, cleanup: Cleanup = Cleanup.CONFIRMED,
            environment_failure: str = "") -> Classified:
        valid = verification == Verification.VALID
        return Classified(execution, verification, usage, cleanup, score if valid else None,
                          one_line(environment_failure, 200), detail)

    if etype == CANCELLED:
        return out(Execution.UNKNOWN, Verification.NOT_RUN, "trial cancelled")
    if etype in DETERMINISTIC:
        return out(Execution.UNKNOWN if agent_started else Execution.NOT_STARTED, Verification.NOT_RUN,
                   "harbor cannot run this configuration", environment_failure=f"harbor: {said}")
    if etype in PROVIDER_REFUSED:
        return out(Execution.UNKNOWN if agent_started else Execution.NOT_STARTED, Verification.NOT_RUN,
                   "model provider refused the agent", environment_failure=f"model provider refused: {said}")
    if etype in PROVIDER_THROTTLED or (etype in PROVIDER_FAILED and THROTTLED_MESSAGE.search(message)):
        # The agent ran (its requests were what the provider refused) unless Harbor says not.
        reason = one_line(f"provider throttled: {said}", ID_CHARS_MAX)
        return out(Execution.SUBJECT_FAILED if agent_started else Execution.NOT_STARTED, Verification.NOT_RUN,
                   f"model provider throttled the agent: {said}")._replace(throttled=reason)
    if not agent_started:
        return out(Execution.NOT_STARTED, Verification.NOT_RUN,
                   f"agent never started: {said or 'no exception recorded'}")
    if etype in PROVIDER_FAILED or etype in SANDBOX_FAILED:
        return out(Execution.UNKNOWN, Verification.NOT_RUN, f"not a measurement: {said}")
    if etype in VERIFIER_FAILED:
        return out(Execution.COMPLETED, Verification.INVALID, f"verifier failed: {said}")
    if not etype or etype in AGENT_ENDED:
        execution = Execution.COMPLETED if not etype else Execution.SUBJECT_FAILED
        head = "agent completed" if not etype else f"agent ended: {said}"
        if score is None:
            why = problem if verifier_started else "verifier did not run"
            return out(execution, Verification.INVALID, f"{head}; {why}")
        return out(execution, Verification.VALID, f"{head}; reward {score:g}")
    # Any other exception aborts the trial before verification; with a reward it came after
    # it (stopping the environment), so the reward stands but cleanup is not known.
    if score is not None and verifier_started:
        return out(Execution.COMPLETED, Verification.VALID, f"reward {score:g}; then {said}",
                   cleanup=Cleanup.UNKNOWN)
    return out(Execution.UNKNOWN, Verification.NOT_RUN, f"trial failed: {said}")
