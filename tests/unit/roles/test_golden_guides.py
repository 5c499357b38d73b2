"""Golden plans for the llm-d well-lit paths: each pod of each guide (its facts, with file and commit:
tests/fixtures/guides/*.yaml) against the plan of the recipe that follows it, argv for argv and env for
env. A guide pod whose command is shell is evaluated by bash with the pod's LWS env first, so its
arithmetic and quoting are the guide's own. What differs must be listed in the fixture (`differences:`, by
pool; shared ones by name from tests/fixtures/guide-differences.yaml), each with why; anything else
fails. docs/reference/guide-differences.md is generated from those whys.
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


SHARED = yaml.safe_load((ROOT / "tests" / "fixtures" / "guide-differences.yaml").read_text())
FIELDS = ("guide", "plan", "sidecar_guide", "sidecar_plan", "env_plan_only", "env_guide_only", "env_values")


@dataclass(frozen=True)
class Difference:
    """Words only the guide's command has, words only the plan's has (the engine's, the sidecar's),
    env names only one side sets or both set to other values, and why
    (tests/fixtures/guide-differences.yaml says what each field holds)."""

    guide: tuple[str, ...]
    plan: tuple[str, ...]
    sidecar_guide: tuple[str, ...]
    sidecar_plan: tuple[str, ...]
    env_plan_only: tuple[str, ...]
    env_guide_only: tuple[str, ...]
    env_values: tuple[str, ...]
    why: str


def difference(entry: str | dict[str, Any]) -> Difference:
    """A fixture's entry: a name in the shared file, or a difference of its own written the same way."""
    data = SHARED[entry] if isinstance(entry, str) else entry
    assert set(data) <= {*FIELDS, "why"} and data["why"], data
    return Difference(**{f: tuple(data.get(f, ())) for f in FIELDS}, why=data["why"])


def differences(data: dict[str, Any], pool: str) -> list[Difference]:
    """What the guide fixture lists for its pods of one pool (every LWS worker of a role runs one
    script, so the differences are the pool's)."""
    return [difference(entry) for entry in data.get("differences", {}).get(pool, [])]


def words_of(expected: list[Difference], field: str) -> Counter[str]:
    return Counter(w for d in expected for w in getattr(d, field))


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
DOWNWARD_API = {"status.podIP": POD_IP, "metadata.namespace": "llm-d"}


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
    env = {**guide_env(pod), **{k: DOWNWARD_API[v] for k, v in pod.get("env_from_field", {}).items()}}
    return [kubernetes_expand(w, env) for w in [*pod["command"], *pod["args"]]]


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
    expected = differences(data, pod["pool"])
    assert Counter(guide) - Counter(planned) == words_of(expected, "guide")
    assert Counter(planned) - Counter(guide) == words_of(expected, "plan")


@pytest.mark.parametrize(("recipe", "data", "pod_name", "pod"), CASES, ids=[f"{c[0]}/{c[2]}" for c in CASES])
def test_the_plan_has_the_guides_env(
    plan_json: Any, recipe: str, data: dict[str, Any], pod_name: str, pod: dict[str, Any]
) -> None:
    env, expected = engine(pod_plan(plan_json, recipe, pod))["env"], guide_env(pod)
    listed = differences(data, pod["pool"])
    assert set(env) - set(expected) == set(words_of(listed, "env_plan_only"))
    assert set(expected) - set(env) == set(words_of(listed, "env_guide_only"))
    differ = {k for k in set(env) & set(expected) if env[k] != expected[k]}
    assert differ == set(words_of(listed, "env_values"))
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
    expected = differences(data, pod["pool"])
    assert Counter(guide) - Counter(planned) == words_of(expected, "sidecar_guide")
    assert Counter(planned) - Counter(guide) == words_of(expected, "sidecar_plan")
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
    # The path's commit is recorded once, in the recipe: the pod's facts are read at it, and a source
    # that names a commit of its own is one not re-read there (never a second copy of the same one).
    assert "commit" not in source and guide.commit
    assert all(s.get("commit") != guide.commit for s in data["sources"].values())
    pool = load_recipe(RecipeSource(recipe, None)).pools[pod["pool"]]
    assert getattr(pool, "replicas", 1) == pod.get("replicas", 1)


def test_every_shared_difference_is_used_and_documented() -> None:
    """A shared difference no guide lists any more is dead; the page is generated from the whys
    (scripts/generate_docs.py, docs/reference/guide-differences.md; its drift test keeps it current)."""
    used = {
        e
        for _, data, _, _ in CASES
        for es in data.get("differences", {}).values()
        for e in es
        if isinstance(e, str)
    }
    assert used == set(SHARED)
    page = (ROOT / "docs" / "reference" / "guide-differences.md").read_text()
    assert all(" ".join(SHARED[name]["why"].split()) in page for name in SHARED)


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
    expected = differences(data, "decode")
    assert Counter(guide) - Counter(planned) == words_of(expected, "guide")
    assert Counter(planned) - Counter(guide) == words_of(expected, "plan")
    assert set(words(extra)) <= set(planned)
