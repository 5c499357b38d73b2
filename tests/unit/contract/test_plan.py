"""launcher/contract/plan.py: the shutdown budget every plan carries (the engine's --shutdown-timeout and
the supervisor's deadlines come from it)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launcher.contract.plan import ShutdownBudget


@given(st.integers(min_value=1, max_value=100_000))
def test_budget_fits_the_grace_period(grace: int) -> None:
    b = ShutdownBudget.from_grace(grace)
    assert 0 <= b.drain <= b.engine_deadline <= b.kill_at < grace
    assert b.drain + b.teardown + b.sidecar_window + b.kill_margin <= grace


@pytest.mark.parametrize(("grace", "drain", "kill_at"), [(10, 6, 9), (30, 17, 27), (90, 75, 85)])
def test_budget_examples(grace: int, drain: int, kill_at: int) -> None:
    budget = ShutdownBudget.from_grace(grace)
    assert (budget.drain, budget.kill_at) == (drain, kill_at)


def test_engine_shutdown_timeout_follows_llmd_grace_seconds(plan_json: Any) -> None:
    engine = plan_json(env={"LLMD_GRACE_SECONDS": "90", "LLMD_DEREGISTER_SECONDS": "0"})["processes"][0][
        "argv"
    ]
    assert engine[engine.index("--shutdown-timeout") + 1] == "75"


@pytest.mark.parametrize(
    ("grace", "asked", "deregister", "drain"), [(90, 5, 5, 70), (30, 5, 5, 12), (12, 5, 2, 5), (5, 5, 0, 3)]
)
def test_deregistration_comes_out_of_the_drain(grace: int, asked: int, deregister: int, drain: int) -> None:
    """The deregistration delay is taken from the drain, capped at a sixth of a short grace period."""
    budget = ShutdownBudget.from_grace(grace, asked)
    base = ShutdownBudget.from_grace(grace)
    assert (budget.deregister, budget.drain) == (deregister, drain)
    assert budget.drain == max(0, base.drain - budget.deregister)
    assert (budget.engine_deadline, budget.kill_at) == (base.engine_deadline, base.kill_at)


@given(st.integers(min_value=1, max_value=100_000), st.integers(min_value=0, max_value=1000))
def test_budget_with_deregistration_fits_the_grace_period(grace: int, deregister: int) -> None:
    b = ShutdownBudget.from_grace(grace, deregister)
    assert b.deregister + b.drain + b.teardown <= b.engine_deadline <= b.kill_at < grace


def test_bad_grace_seconds_is_one_line(run_cli: Any) -> None:
    code, _, err = run_cli("plan", env={"LLMD_GRACE_SECONDS": "0"})
    assert code == 2
    assert err.startswith("llm-d-launcher: error: LLMD_GRACE_SECONDS: ")
    assert "terminationGracePeriodSeconds" in err and len(err.splitlines()) == 1


def test_shutdown_timeout_cannot_be_set_by_hand(run_cli: Any) -> None:
    code, _, err = run_cli("plan", "--extra-args", "--shutdown-timeout 5")
    assert code == 2 and "LLMD_GRACE_SECONDS" in err
