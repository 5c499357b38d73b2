"""Golden plans for the llm-d well-lit paths: each pod of each guide (its facts, with file and commit:
tests/fixtures/guides/*.yaml) against the plan of the recipe that follows it, argv for argv and env for
env. A guide pod whose command is shell is evaluated by bash with the pod's LWS env first, so its
arithmetic and quoting are the guide's own. What differs must be listed below, each with its reason,
and named in docs/recipes.md "Where the guide and the engines disagree"; anything else fails.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "guides"
DOC = ROOT / "docs" / "recipes.md"
DISAGREE = "## Where the guide and the engines disagree"


@dataclass(frozen=True)
class Difference:
    """Words only the guide's command has, words only the plan's has, and why."""

    guide: tuple[str, ...]
    plan: tuple[str, ...]
    why: str


GRACE = Difference(
    ("--shutdown-timeout=45",),
    ("--shutdown-timeout=48",),
    "the launcher derives the drain from LLMD_GRACE_SECONDS=75 (the guide's terminationGracePeriodSeconds) "
    "less its own deregistration (the guide's 15 s preStop sleep, capped at a sixth: 12 s), the teardown, "
    "the sidecar window and its kill margin (ShutdownBudget)",
)
DEFAULT_GRACE = Difference(
    (),
    ("--shutdown-timeout=12",),
    "the guide sets no drain and no grace period (Kubernetes' 30 s); the launcher drains in-flight "
    "requests within it: 30 s less deregistration, teardown, sidecar window and kill margin",
)
TP_ALIAS = Difference(
    ("--tensor-parallel-size=2",),
    ("--tp-size=2",),
    "SGLang's --tensor-parallel-size is an alias of --tp-size (one dest, tp_size), which the launcher writes",
)
PORT = Difference((), ("--port=8000",), "the launcher names the port it probes; vLLM's default, unchanged")
READY_TIMEOUT = "VLLM_ENGINE_READY_TIMEOUT_S"  # raised to LLMD_STARTUP_SECONDS, so vLLM waits as long
# The interface that holds POD_IP, for gloo and NCCL, and the pod's IP for vLLM: set on every vLLM pod.
NETWORK = {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "VLLM_HOST_IP"}
SGLANG_NETWORK = {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "SGLANG_HOST_IP"}

NIXL_PORT = "VLLM_NIXL_SIDE_CHANNEL_PORT"  # vLLM's default (5600), written out: the launcher declares it
PRECISE_GPU_GRACE = Difference(
    ("--shutdown-timeout=30",),
    ("--shutdown-timeout=35",),
    "the launcher derives the drain from LLMD_GRACE_SECONDS=60 (the guide's terminationGracePeriodSeconds) "
    "less its own deregistration (the guide's 15 s preStop sleep, capped at a sixth: 10 s), the teardown, "
    "the sidecar window and its kill margin (ShutdownBudget)",
)
TIERED_GRACE = Difference(
    (),
    ("--shutdown-timeout=110",),
    "the guide sets no drain under its 130 s grace period; the launcher drains in-flight requests within "
    "it: 130 s less deregistration (5 s), teardown, sidecar window and kill margin",
)
ACCESS_LOG = Difference(
    (),
    ("--disable-access-log-for-endpoints=/health",),
    "the launcher polls /health every second; the guide's command keeps vLLM's access log as it is",
)
SIDECAR_TARGET = Difference(
    (),
    ("--model-server-port=8200", "--data-parallel-size=1"),
    "the launcher names the engine port behind the sidecar and the ranks it fronts; the guide relies on "
    "the sidecar's defaults (8200, 1), which are the same values",
)

# (recipe, pod) -> the argv differences; the env differences are the plan-only names.
DIFFERENCES: dict[tuple[str, str], list[Difference]] = {
    ("optimized-baseline-cpu-vllm", "decode"): [GRACE, PORT],
    ("optimized-baseline-gpu-vllm", "decode"): [DEFAULT_GRACE, PORT],
    ("optimized-baseline-gpu-sglang", "decode"): [TP_ALIAS],
    ("pd-disaggregation-gpu-sglang", "prefill"): [TP_ALIAS],
    ("pd-disaggregation-gpu-sglang", "decode"): [TP_ALIAS],
    ("pd-disaggregation-gpu-vllm", "prefill"): [DEFAULT_GRACE, PORT],
    ("pd-disaggregation-gpu-vllm", "decode"): [DEFAULT_GRACE],
    ("optimized-baseline-tpu-v7-vllm", "decode"): [GRACE],
    ("precise-prefix-cache-routing-cpu-vllm", "decode"): [GRACE, PORT],
    ("precise-prefix-cache-routing-gpu-sglang", "decode"): [TP_ALIAS],
    ("precise-prefix-cache-routing-gpu-vllm", "decode"): [PRECISE_GPU_GRACE, PORT],
    ("tiered-prefix-cache-gpu-vllm", "decode"): [TIERED_GRACE, PORT, ACCESS_LOG],
    ("wide-ep-deepseek-v4", "prefill"): [DEFAULT_GRACE],
    ("wide-ep-deepseek-v4", "decode"): [DEFAULT_GRACE],
}
SIDECAR_DIFFERENCES: dict[tuple[str, str], list[Difference]] = {
    ("pd-disaggregation-gpu-sglang", "decode"): [SIDECAR_TARGET],
    ("pd-disaggregation-gpu-vllm", "decode"): [SIDECAR_TARGET],
    ("wide-ep-deepseek-v4", "decode"): [SIDECAR_TARGET],
}
# The guide's script inputs (read by its shell arithmetic, not by vLLM): the launcher derives the values.
SHELL_INPUTS: dict[tuple[str, str], set[str]] = {
    ("wide-ep-deepseek-v4", "prefill"): {"DP_SIZE_LOCAL", "TP_SIZE"},
    ("wide-ep-deepseek-v4", "decode"): {"DP_SIZE_LOCAL", "TP_SIZE", "MAX_TOKENS"},
}
# The guide's inputs to Kubernetes' $(VAR) expansion of its args (vLLM reads none of them): the
# launcher writes the KV-event endpoint and topic itself.
EXPANSION_INPUTS: dict[tuple[str, str], set[str]] = {
    ("precise-prefix-cache-routing-cpu-vllm", "decode"): {"POD_PORT", "KV_EVENTS_ENDPOINT"},
    ("precise-prefix-cache-routing-gpu-sglang", "decode"): {"POD_PORT", "KV_EVENTS_ENDPOINT"},
    ("precise-prefix-cache-routing-gpu-vllm", "decode"): {"POD_PORT", "KV_EVENTS_ENDPOINT"},
}
# Set by both, to other values: the guide names eth0, the launcher the interface that holds POD_IP.
IFNAMES = {"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}
ENV_VALUE_DIFFERENCES: dict[tuple[str, str], set[str]] = {
    ("wide-ep-deepseek-v4", "prefill"): IFNAMES,
    ("wide-ep-deepseek-v4", "decode"): IFNAMES,
}
ENV_DIFFERENCES: dict[tuple[str, str], set[str]] = {
    ("optimized-baseline-cpu-vllm", "decode"): {READY_TIMEOUT, *NETWORK},
    ("optimized-baseline-gpu-vllm", "decode"): {READY_TIMEOUT, *NETWORK},
    ("optimized-baseline-gpu-sglang", "decode"): SGLANG_NETWORK,
    ("pd-disaggregation-gpu-sglang", "prefill"): SGLANG_NETWORK,
    ("pd-disaggregation-gpu-sglang", "decode"): SGLANG_NETWORK,
    ("pd-disaggregation-gpu-vllm", "prefill"): {READY_TIMEOUT, *NETWORK, NIXL_PORT},
    ("pd-disaggregation-gpu-vllm", "decode"): {READY_TIMEOUT, *NETWORK, NIXL_PORT},
    ("optimized-baseline-tpu-v7-vllm", "decode"): {READY_TIMEOUT, *NETWORK},
    ("precise-prefix-cache-routing-cpu-vllm", "decode"): {READY_TIMEOUT, *NETWORK},
    ("precise-prefix-cache-routing-gpu-sglang", "decode"): SGLANG_NETWORK,
    ("precise-prefix-cache-routing-gpu-vllm", "decode"): {READY_TIMEOUT, *NETWORK},
    ("tiered-prefix-cache-gpu-vllm", "decode"): {READY_TIMEOUT, *NETWORK},
    ("wide-ep-deepseek-v4", "prefill"): {READY_TIMEOUT, "VLLM_HOST_IP", NIXL_PORT},
    ("wide-ep-deepseek-v4", "decode"): {READY_TIMEOUT, "VLLM_HOST_IP", NIXL_PORT},
}


def words(argv: list[str]) -> list[str]:
    """argv as one word per flag: `--flag value` and `--flag=value` both become `--flag=value`,
    `--a_b` becomes `--a-b` (vLLM and SGLang read both), JSON values compared as data."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            name = "--" + name[2:].replace("_", "-")
            if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                value, eq = argv[i + 1], "="
                i += 1
            if value.startswith("{"):
                value = json.dumps(json.loads(value), sort_keys=True, separators=(",", ":"))
            out.append(f"{name}{eq}{value}")
        else:
            out.append(word)
        i += 1
    return out


def fixtures() -> list[tuple[str, dict[str, Any], str, dict[str, Any]]]:
    cases = []
    for path in sorted(FIXTURES.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        for pod_name, pod in data["pods"].items():
            cases.append((data["recipe"], data, pod_name, pod))
    return cases


CASES = fixtures()


POD_IP = "10.64.0.10"


def guide_env(pod: dict[str, Any]) -> dict[str, str]:
    """The guide's literal env, with the downward API's pod IP filled in."""
    return {k: str(v).replace("$(POD_IP)", POD_IP) for k, v in pod["env"].items()}


def run_guide_shell(pod: dict[str, Any]) -> dict[str, list[str]]:
    """The guide's container script run by bash with the pod's env (its literal values, the LWS env and
    POD_IP), every program it runs replaced by a recorder: what each was called with. PATH holds only
    the recorders, so nothing of the host runs (the script's `find /dev/shm -delete` included)."""
    with tempfile.TemporaryDirectory() as directory:
        stubs = Path(directory)
        for program in ("vllm", "find"):
            (stubs / program).write_text(
                f'#!/bin/sh\nprintf "%s\\0" {program} "$@" > "$GUIDE_RECORD_DIR/{program}.argv"\n'
            )
            (stubs / program).chmod(0o755)
        env = {**guide_env(pod), **pod["lws_env"], "POD_IP": POD_IP}
        env |= {"PATH": str(stubs), "GUIDE_RECORD_DIR": directory}
        done = subprocess.run(
            [*pod["command"], pod["shell"]], env=env, capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, done.stderr
        return {f.name.removesuffix(".argv"): f.read_text().split("\0")[:-1] for f in stubs.glob("*.argv")}


# The downward API's values for the fields the guides' pods read (env_from_field).
FIELDS = {"status.podIP": POD_IP, "metadata.namespace": "llm-d"}


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def kubernetes_expand(word: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of a container's command and args: $(VAR) is the container's env var VAR,
    $$ is a literal $, a reference to an undefined var stays as written (k8s.io/kubernetes
    third_party/forked/golang/expansion)."""
    return _REFERENCE.sub(lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), word)


def guide_argv(pod: dict[str, Any]) -> list[str]:
    """The engine command the guide's pod runs: its command and args as Kubernetes expands them, or
    what its script execs."""
    if "shell" in pod:
        return run_guide_shell(pod)["vllm"]
    env = {**guide_env(pod), **{k: FIELDS[v] for k, v in pod.get("env_from_field", {}).items()}}
    return [kubernetes_expand(w, env) for w in [*pod["command"], *pod["args"]]]


def role_of(pod_name: str, pod: dict[str, Any]) -> str:
    """What the differences are listed under: the pool (every LWS worker of a role runs one script)."""
    return str(pod["pool"])


def pod_plan(plan_json: Any, recipe: str, pod: dict[str, Any]) -> dict[str, Any]:
    env = {"LLMD_POOL": pod["pool"], "POD_IP": POD_IP, **pod["lws_env"]}
    plan: dict[str, Any] = plan_json("--recipe", recipe, env=env)
    return plan


def engine(plan: dict[str, Any], name: str = "engine") -> dict[str, Any]:
    (process,) = [p for p in plan["processes"] if p["name"] == name]
    found: dict[str, Any] = process
    return found


@pytest.mark.parametrize(("recipe", "data", "pod_name", "pod"), CASES, ids=[f"{c[0]}/{c[2]}" for c in CASES])
def test_the_plan_is_the_guides_command(
    plan_json: Any, recipe: str, data: dict[str, Any], pod_name: str, pod: dict[str, Any]
) -> None:
    process = engine(pod_plan(plan_json, recipe, pod))
    guide, planned = words(guide_argv(pod)), words(process["argv"])
    program = list(itertools.takewhile(lambda w: not w.startswith("--"), guide))
    assert planned[: len(program)] == program  # the program (and vLLM's model), in order
    expected = DIFFERENCES.get((recipe, role_of(pod_name, pod)), [])
    only_guide = Counter(guide) - Counter(planned)
    only_plan = Counter(planned) - Counter(guide)
    assert only_guide == Counter(w for d in expected for w in d.guide)
    assert only_plan == Counter(w for d in expected for w in d.plan)


@pytest.mark.parametrize(("recipe", "data", "pod_name", "pod"), CASES, ids=[f"{c[0]}/{c[2]}" for c in CASES])
def test_the_plan_has_the_guides_env(
    plan_json: Any, recipe: str, data: dict[str, Any], pod_name: str, pod: dict[str, Any]
) -> None:
    env, expected = engine(pod_plan(plan_json, recipe, pod))["env"], guide_env(pod)
    key = (recipe, role_of(pod_name, pod))
    assert set(env) - set(expected) == ENV_DIFFERENCES.get(key, set())
    assert set(expected) - set(env) == SHELL_INPUTS.get(key, set()) | EXPANSION_INPUTS.get(key, set())
    differ = {k for k in set(env) & set(expected) if env[k] != expected[k]}
    assert differ == ENV_VALUE_DIFFERENCES.get(key, set())
    # A Secret's value comes from the pod's env (deploy/), never from the recipe or the plan.
    assert not set(pod.get("env_from_secret", {})) & set(env)


SIDECARS = [c for c in CASES if "sidecar" in c[3]]


def go_words(argv: list[str]) -> list[str]:
    """words() for a Go binary: its flag package reads a bare boolean `--flag` as `--flag=true`."""
    return [w.removesuffix("=true") for w in words(argv)]


@pytest.mark.parametrize(
    ("recipe", "data", "pod_name", "pod"), SIDECARS, ids=[f"{c[0]}/{c[2]}" for c in SIDECARS]
)
def test_the_plans_sidecar_is_the_guides(
    plan_json: Any, recipe: str, data: dict[str, Any], pod_name: str, pod: dict[str, Any]
) -> None:
    """The guide's routing sidecar (a native sidecar container) is a process of the launcher's plan
    with the same flags; the image's entrypoint is the program."""
    sidecar = pod["sidecar"]
    process = engine(pod_plan(plan_json, recipe, pod), sidecar["process"])
    guide, planned = go_words(sidecar["args"]), go_words(process["argv"][1:])
    expected = SIDECAR_DIFFERENCES.get((recipe, role_of(pod_name, pod)), [])
    assert Counter(guide) - Counter(planned) == Counter(w for d in expected for w in d.guide)
    assert Counter(planned) - Counter(guide) == Counter(w for d in expected for w in d.plan)
    assert [p["port"] for p in process["ports"]] == [sidecar["port"]]


@pytest.mark.parametrize(("recipe", "data", "pod_name", "pod"), CASES, ids=[f"{c[0]}/{c[2]}" for c in CASES])
def test_the_recipe_cites_the_guide(
    recipe: str, data: dict[str, Any], pod_name: str, pod: dict[str, Any]
) -> None:
    from launcher.config.recipe_file import RecipeSource, load_recipe

    guide = load_recipe(RecipeSource(recipe, None)).guide
    assert guide is not None and guide.name == data["guide"]
    source = data["sources"][pod["source"]]
    assert source["path"] in guide.manifests
    assert guide.commit == source["commit"]
    pool = load_recipe(RecipeSource(recipe, None)).pools[pod["pool"]]
    assert getattr(pool, "replicas", 1) == pod.get("replicas", 1)


def test_every_difference_is_documented() -> None:
    section = DOC.read_text().split(DISAGREE, 1)[1].split("\n## ", 1)[0]
    for recipe, _pod in DIFFERENCES:
        assert f"`{recipe}`" in section, recipe
    for difference in {d for ds in [*DIFFERENCES.values(), *SIDECAR_DIFFERENCES.values()] for d in ds}:
        for word in (*difference.guide, *difference.plan):
            assert f"`{word.split('=')[0]}`" in section, word
    inputs = [*SHELL_INPUTS.values(), *EXPANSION_INPUTS.values()]
    for names in [*ENV_DIFFERENCES.values(), *inputs, *ENV_VALUE_DIFFERENCES.values()]:
        for name in names:
            assert f"`{name}`" in section, name


def test_words_tell_apart_what_the_engines_would() -> None:
    """Negative control: a different value, a missing flag or another JSON is a difference."""
    assert words(["vllm", "serve", "m", "--max_model_len=8192"]) == words(
        ["vllm", "serve", "m", "--max-model-len", "8192"]
    )
    assert words(["x", "--c", '{"a": 1, "b": 2}']) == words(["x", '--c={"b":2,"a":1}'])
    assert words(["x", "--c", '{"a": 1}']) != words(["x", "--c", '{"a": 2}'])
    assert words(["x", "--m", "8192"]) != words(["x", "--m", "4096"])
    assert words(["x", "--flag", "--m", "1"]) == ["x", "--flag", "--m=1"]


def test_the_guides_scripts_clear_dev_shm_which_the_launcher_does_by_ledger() -> None:
    """The scripts' first command, recorded (not run): the launcher removes only the segments its
    ledger proves its own, so this difference stays (docs/recipes.md)."""
    scripts = [pod for _, _, _, pod in CASES if "shell" in pod]
    assert scripts
    for pod in scripts:
        assert run_guide_shell(pod)["find"] == ["find", "/dev/shm", "-type", "f", "-delete"]


def test_the_sglang_decode_hicache_component_is_three_extra_args(plan_json: Any) -> None:
    """The P/D SGLang guide's optional component (components/sglang-decode-hicache) appends three args
    to decode's command; with the launcher they are the decode pod's LLMD_EXTRA_ARGS (or the pool's
    args in a recipe of one's own), and the plan is the guide's decode command with them."""
    recipe = "pd-disaggregation-gpu-sglang"
    data = yaml.safe_load((FIXTURES / f"{recipe}.yaml").read_text())
    extra, pod = data["hicache_decode_args"], data["pods"]["decode"]
    with_component = {**pod, "args": [*pod["args"], *extra]}
    env = {"LLMD_POOL": pod["pool"], "POD_IP": POD_IP, **pod["lws_env"], "LLMD_EXTRA_ARGS": " ".join(extra)}
    planned = words(engine(plan_json("--recipe", recipe, env=env))["argv"])
    guide = words(guide_argv(with_component))
    expected = DIFFERENCES.get((recipe, "decode"), [])
    assert Counter(guide) - Counter(planned) == Counter(w for d in expected for w in d.guide)
    assert Counter(planned) - Counter(guide) == Counter(w for d in expected for w in d.plan)
    assert set(words(extra)) <= set(planned)
