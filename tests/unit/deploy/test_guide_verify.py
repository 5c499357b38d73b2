"""deploy/<guide>/verify/: the guides' verification (a completion through the router that must name the
served model and carry tokens) and benchmark (inference-perf) steps as manifests. Each renders, is
valid Kubernetes 1.33 (strict), asks the router Service the guide's commands name (`${GUIDE_NAME}-epp`)
for the model the recipe serves, and the serve-check script passes on a good answer and fails on a
wrong or empty one (run with sh, `curl` replaced by a recorder: no network)."""

from __future__ import annotations

import json
import math
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.config.recipe_file import RecipeSource, load_recipe
from tests.manifests import container_env
from tests.unit.deploy.test_manifests import GUIDE, ROOT, kustomize, validate

# Jobs with env of their own, checked by their own tests (test_precise_prefix.py for the last).
OWN_ENV = {"inference-perf", "precise-prefix-check"}
VERIFY = sorted(p.parent for p in ROOT.glob("deploy/*/verify/kustomization.yaml"))


def guide_name(recipe_name: str) -> str:
    """The guide's GUIDE_NAME: its directory in llm-d/llm-d (guides/<name>/ or guides/models/<name>/) as
    the recipe's `guide.manifests` name it; the guides' router Service is `${GUIDE_NAME}-epp` (e.g.
    guides/models/deepseek-v4/README.md at a7922edc, guides/pd-disaggregation/README.md "Configure the
    environment", guides/precise-prefix-cache-routing/guide.yaml at 1cb6e1ee)."""
    guide = load_recipe(RecipeSource(recipe_name, None)).guide
    assert guide is not None, f"deploy/{recipe_name}/verify/ follows a guide: the recipe needs `guide:`"
    found = re.fullmatch(r"guides/(?:models/)?([^/]+)/.*", guide.manifests[0])
    assert found, guide.manifests[0]
    return found[1]


def docs(directory: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(kustomize(directory)) if d]


def served_model(recipe_name: str) -> str:
    model = load_recipe(RecipeSource(recipe_name, None)).model
    return model.served_name or model.path


def job(directory: Path, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs(directory) if d["kind"] == "Job" and d["metadata"]["name"] == name]
    return found


def test_the_kimi_guide_name_is_its_excerpts() -> None:
    assert re.search(rf"^export GUIDE_NAME={guide_name('kimi-k3.1-pro')}$", GUIDE.read_text(), re.M)


@pytest.mark.parametrize("directory", VERIFY, ids=[d.parent.name for d in VERIFY])
def test_the_manifests_are_valid_and_ask_the_guides_router_for_the_served_model(directory: Path) -> None:
    for doc in docs(directory):
        assert validate(doc) == [], doc["metadata"]["name"]
    check = job(directory, "serve-check")
    spec = check["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Never" and check["spec"]["backoffLimit"] == 0
    assert check["spec"]["activeDeadlineSeconds"] > 0  # a router that never answers fails the Job
    expected = {
        "IP": f"{guide_name(directory.parent.name)}-epp",
        "MODEL": served_model(directory.parent.name),
    }
    for doc in docs(directory):
        if doc["kind"] == "Job" and doc["metadata"]["name"] not in OWN_ENV:  # the guides' curl Jobs
            assert container_env(doc["spec"]["template"]["spec"]["containers"][0]) == expected


# The seed guide's Benchmarking table: its row name -> inference-perf's conversation_replay key.
WORKLOAD_ROWS = {
    "Shared System Prompt": "shared_system_prompt_len",
    "Dynamic System Prompt": "dynamic_system_prompt_len",
    "Turns per Conversation": "turns_per_conversation",
    "Input Tokens per Turn": "input_tokens_per_turn",
    "Output Tokens per Turn": "output_tokens_per_turn",
    "Tool Call Latency": "tool_call_latency_sec",
}


def number(cell: str) -> int:
    """A table cell such as `220,000 tokens`, `1s` or `15 seconds`."""
    found = re.fullmatch(r"([\d,]+)\s*(tokens|turns|seconds|s)?", cell.strip())
    assert found, cell
    return int(found[1].replace(",", ""))


def guide_workload() -> tuple[dict[str, Any], dict[str, int]]:
    """The Kimi guide's Benchmarking section: each row of its table as inference-perf writes it, and
    its run variables (`export NAME=...`, the $((...)) evaluated)."""
    text = GUIDE.read_text()
    rows: dict[str, Any] = {}
    for line in text.splitlines():
        cells = line.split("\t")
        if cells[0] in WORKLOAD_ROWS:
            _, kind, low, high, mean, std, _ = cells
            key = WORKLOAD_ROWS[cells[0]]
            if kind == "Constant":
                rows[key] = number(mean)
            else:
                rows[key] = {"type": kind.lower(), "min": number(low), "max": number(high),
                             "mean": number(mean), "std_dev": number(std)}  # fmt: skip
    variables: dict[str, int] = {}
    benchmarking = text[text.index("\nBenchmarking\n") :]
    for name, value in re.findall(r"^export (\w+)=(.+)$", benchmarking, re.MULTILINE):
        operands = [
            variables[t] if t in variables else int(t)
            for t in re.split(r"\s*[*+]\s*", value.removeprefix("$((").removesuffix("))"))
        ]
        variables[name] = math.prod(operands) if "*" in value else sum(operands)
    return rows, variables


def test_the_kimi_benchmark_is_the_guides_multi_turn_workload() -> None:
    rows, variables = guide_workload()
    assert set(rows) == set(WORKLOAD_ROWS.values())
    assert set(variables) == {"CONCURRENCY_LEVEL", "NUM_REQUESTS", "SEED"}
    directory = ROOT / "deploy" / "kimi-k3.1-pro" / "verify"
    (config_map,) = [d for d in docs(directory) if d["kind"] == "ConfigMap"]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    replay = config["data"]["conversation_replay"]
    assert config["data"]["type"] == "conversation_replay"
    for key, expected in rows.items():
        assert replay[key] == expected, key
    (stage,) = config["load"]["stages"]
    assert config["load"]["type"] == "concurrent"
    assert stage == {
        "num_requests": variables["NUM_REQUESTS"],
        "concurrency_level": variables["CONCURRENCY_LEVEL"],
    }
    assert replay["num_conversations"] == variables["CONCURRENCY_LEVEL"]
    assert replay["seed"] == variables["SEED"]
    model = served_model("kimi-k3.1-pro")
    assert config["server"]["model_name"] == config["tokenizer"]["pretrained_model_name_or_path"] == model
    assert config["server"]["base_url"] == "http://kimi-k3-1-epp"
    tpu = load_recipe(RecipeSource("kimi-k3.1-pro", None)).pools["tpu"]
    assert replay["max_model_len"] == tpu.args["context-length"]  # sessions reach ~460K tokens
    spec = job(directory, "inference-perf")["spec"]["template"]["spec"]
    assert spec["restartPolicy"] == "Never"  # a Job's pods may not restart Always
    (volume,) = spec["volumes"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    assert spec["containers"][0]["args"] == ["--config_file", "/etc/config/config.yaml"]


def run_script(
    container: dict[str, Any], directory: Path, answer: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The container's command with its env, `curl` replaced by a recorder that appends its argv to a
    file and runs `answer` (sh): what it printed, and every argument curl was given."""
    directory.mkdir(exist_ok=True)
    calls = directory / "calls"
    calls.touch()
    curl = directory / "curl"
    curl.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> "{calls}"\n{answer}\n')
    curl.chmod(curl.stat().st_mode | stat.S_IXUSR)
    done = subprocess.run(
        [*container["command"], *container["args"]],
        env={**container_env(container), "PATH": f"{directory}:{os.environ['PATH']}"},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    return done, calls.read_text().splitlines()


ANSWER = '{"id":"cmpl-1","object":"text_completion","model":"%s","choices":[{"index":0,"text":" Hello"}]}'


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (ANSWER % "moonshotai/Kimi-K3.1-Pro", 0),
        (ANSWER % "some/other-model", 1),
        ('{"model":"moonshotai/Kimi-K3.1-Pro","error":"no endpoints"}', 1),
        ("", 1),
    ],
    ids=["served", "wrong-model", "no-choices", "no-answer"],
)
def test_the_serve_check_passes_only_on_the_served_model_with_tokens(
    answer: str, code: int, tmp_path: Path
) -> None:
    container = job(ROOT / "deploy" / "kimi-k3.1-pro" / "verify", "serve-check")["spec"]["template"]["spec"][
        "containers"
    ][0]
    done, argv = run_script(container, tmp_path, f"printf '%s' '{answer}'")
    assert done.returncode == code, done.stdout + done.stderr
    assert ("OK: moonshotai/Kimi-K3.1-Pro served through the router" in done.stdout) == (code == 0)
    assert "http://kimi-k3-1-epp/v1/completions" in argv


def test_the_pd_requests_send_five_long_prompts_through_the_router(tmp_path: Path) -> None:
    """The P/D guide's step: 5 completions of the served model, each with the ~1k-token prompt (60
    sentences), through pd-disaggregation-epp; the script itself does not judge the answers."""
    for engine in ("vllm", "sglang"):
        directory = ROOT / "deploy" / f"pd-disaggregation-gpu-{engine}" / "verify"
        container = job(directory, "pd-test")["spec"]["template"]["spec"]["containers"][0]
        done, argv = run_script(container, tmp_path / engine, 'echo "request: HTTP 200"')
        assert done.returncode == 0, done.stderr
        assert argv.count("http://pd-disaggregation-epp/v1/completions") == 5
        bodies = [json.loads(a) for a in argv if a.startswith("{")]
        assert [b["model"] for b in bodies] == ["openai/gpt-oss-120b"] * 5
        assert all(b["prompt"].count("The prefill pod computes") == 60 for b in bodies)
