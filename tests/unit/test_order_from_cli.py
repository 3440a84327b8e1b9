"""`--order-from RUN` on `fleetctl submit` and `local`: what it does to the policy sent, and how
`results`, `status` and their JSON name the order a run used; pure functions, no coordinator."""
from __future__ import annotations

import json

import pytest

from tools.fleetctl.cli import build_parser
from tools.fleetctl.submission import SubmissionError, with_order_from
from tools.fleetctl.views import dispatch_order, order_text


def test_order_from_sets_the_policy_field_and_keeps_the_rest() -> None:
    out = json.loads(with_order_from('{"maxAttemptsPerCell": 2}', "run-a"))
    assert out == {"maxAttemptsPerCell": 2, "orderFrom": "run-a"}
    assert with_order_from("{}", "") == "{}"
    assert json.loads(with_order_from('{"orderFrom": "run-a"}', "run-a")) == {"orderFrom": "run-a"}


def test_a_policy_naming_another_run_is_refused_not_overridden() -> None:
    with pytest.raises(SubmissionError, match="contradicts"):
        with_order_from('{"orderFrom": "run-b"}', "run-a")
    with pytest.raises(SubmissionError, match="not a JSON object"):
        with_order_from("[1]", "run-a")


@pytest.mark.parametrize("argv", [["submit", "spec.json", "--order-from", "run-a"],
                                  ["local", "spec.json", "--order-from", "run-a"]])
def test_submit_and_local_take_order_from(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).order_from == "run-a"


def test_results_and_status_name_the_order() -> None:
    status = {"runs": [{"run_id": "r2", "order_from": "r1"}, {"run_id": "r1", "order_from": None}]}
    assert dispatch_order(status, "r2") == {"kind": "longest_first", "from_run": "r1", "text": order_text("r1")}
    assert dispatch_order(status, "r1")["kind"] == "spec"
    assert "r1" in order_text("r1") and order_text(None) == "spec order"
