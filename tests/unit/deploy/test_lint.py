"""`llm-d-launcher lint -f`: every deploy/ path, rendered as `kubectl apply -k` would send it, plans
and lints clean; a copy with one mistake planted is caught, one line naming the object, the field and
the fix, exit 1; unreadable input is exit 2, one line."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy.test_manifests import COMPONENTS, combinations, kustomize, with_components

ROOT = Path(__file__).resolve().parents[3]
PATHS = sorted(
    p.parent
    for p in (ROOT / "deploy").glob("**/kustomization.yaml")
    if yaml.safe_load(p.read_text()).get("kind") == "Kustomization"
)
KIMI = ROOT / "deploy" / "kimi-k3.1-pro"
TPU = KIMI / "tpu"
BASELINE = ROOT / "deploy" / "optimized-baseline-gpu-vllm"
Run = Callable[..., tuple[int, str, str]]


@functools.cache
def rendered(directory: Path) -> str:
    return kustomize(directory)


def lint(run_cli: Run, tmp_path: Path, docs: list[dict[str, Any]]) -> tuple[int, list[str], str]:
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    code, out, err = run_cli("lint", "-f", str(path))
    return code, out.splitlines(), err


def broken(directory: Path, edit: Callable[[list[dict[str, Any]]], None]) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(rendered(directory)) if d]
    edit(docs)
    return docs


def templates(docs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The pod specs of a workload (an LWS: its leader and worker templates)."""
    (doc,) = [d for d in docs if d["metadata"]["name"] == name]
    if doc["kind"] != "LeaderWorkerSet":
        return [doc["spec"]["template"]["spec"]]
    lwt = doc["spec"]["leaderWorkerTemplate"]
    return [t["spec"] for t in (lwt.get("leaderTemplate"), lwt["workerTemplate"]) if t]


def each_container(docs: list[dict[str, Any]], name: str, edit: Callable[[dict[str, Any]], None]) -> None:
    for spec in templates(docs, name):
        edit(spec["containers"][0])


def caught(
    run_cli: Run, tmp_path: Path, directory: Path, edit: Callable[[list[dict[str, Any]]], None]
) -> str:
    """The one finding of a broken copy of a rendering (exit 1)."""
    code, lines, _ = lint(run_cli, tmp_path, broken(directory, edit))
    assert code == 1 and len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("directory", PATHS, ids=[str(p.relative_to(ROOT / "deploy")) for p in PATHS])
def test_every_deploy_path_lints_clean(directory: Path, tmp_path: Path, run_cli: Run) -> None:
    docs = [d for d in yaml.safe_load_all(rendered(directory)) if d]
    code, lines, err = lint(run_cli, tmp_path, docs)
    assert (code, lines) == (0, []), err


COMBINED = [(base, c) for base, c in combinations() if c]


@pytest.mark.parametrize(
    ("base", "components"), COMBINED, ids=[f"{b.name}+{'+'.join(c)}" for b, c in COMBINED]
)
def test_every_combination_of_components_lints_clean(
    base: Path, components: tuple[str, ...], tmp_path: Path, run_cli: Run
) -> None:
    docs = [d for d in yaml.safe_load_all(with_components(base, components)) if d]
    code, lines, err = lint(run_cli, tmp_path, docs)
    assert (code, lines) == (0, []), err


def test_a_component_added_by_a_kustomization_without_a_namespace(tmp_path: Path, run_cli: Run) -> None:
    """The DisaggregatedSet lands in the default namespace, the base's generated ConfigMaps in the
    guide's: kustomize rewrites names only within one namespace, so its pods mount a ConfigMap that
    will never exist."""
    with tempfile.TemporaryDirectory(dir=ROOT / "deploy") as directory:
        here = Path(directory)
        (here / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [os.path.relpath(KIMI, here)],
            "components": [os.path.relpath(COMPONENTS / "disaggregated-set", here)],
        }))  # fmt: skip
        docs = [d for d in yaml.safe_load_all(kustomize(here)) if d]
    code, lines, _ = lint(run_cli, tmp_path, docs)
    assert code == 1 and len(lines) == 3, lines  # prefill's leader and worker templates, decode's
    assert all("configMapGenerator's kimi-k3-1-" in line for line in lines)
    assert all("in namespace llm-d-kimi-k3-1, the pod in default" in line for line in lines)
    assert all(
        "set `namespace:` in the kustomization that adds the DisaggregatedSet" in line for line in lines
    )


def test_it_says_which_recipe_each_pod_was_planned_with(tmp_path: Path, run_cli: Run) -> None:
    code, _, err = lint(run_cli, tmp_path, broken(KIMI, lambda docs: None))
    assert code == 0
    assert (
        "LeaderWorkerSet/kimi-k3-1-gpu-vllm-decode" in err and "planned with the recipe in ConfigMap " in err
    )

    # Without its ConfigMap in the stream (a pod spec linted alone) the image's built-in recipe is planned.
    def without_config_maps(docs: list[dict[str, Any]]) -> None:
        docs[:] = [d for d in docs if d["kind"] != "ConfigMap"]

    code, _, err = lint(run_cli, tmp_path, broken(KIMI, without_config_maps))
    assert code == 0
    assert "planned with the image's built-in recipe kimi-k3.1-pro (LLMD_RECIPE): ConfigMap" in err
    assert "7 launcher pod(s)" in err  # the master, prefill's 2 and decode's 4
    _, _, err = lint(run_cli, tmp_path, broken(BASELINE, lambda docs: None))
    assert "planned with the built-in recipe optimized-baseline-gpu-vllm (LLMD_RECIPE)" in err


def test_gpus_fewer_than_the_pools_parallelism(tmp_path: Path, run_cli: Run) -> None:
    def edit(docs: list[dict[str, Any]]) -> None:
        def two(c: dict[str, Any]) -> None:
            c["resources"]["limits"]["nvidia.com/gpu"] = "2"

        each_container(docs, "kimi-k3-1-gpu-vllm-prefill", two)

    code, lines, _ = lint(run_cli, tmp_path, broken(KIMI, edit))
    assert code == 1 and len(lines) == 2, lines  # the leader's template and the worker's
    said = (
        "nvidia.com/gpu: requests '2' but pool prefill needs 4 devices per pod"
        " (TP 8 x PP 1 = 8 devices, 4 per pod: TP across 2 pods per stage)"
    )
    assert all(
        said in line and line.endswith("request 4, or change pools.prefill's parallelism") for line in lines
    )


def test_tpu_chips_count_two_devices_each_on_tpu7x(tmp_path: Path, run_cli: Run) -> None:
    def edit(docs: list[dict[str, Any]]) -> None:
        def eight(c: dict[str, Any]) -> None:
            c["resources"]["limits"]["google.com/tpu"] = c["resources"]["requests"]["google.com/tpu"] = "8"

        each_container(docs, "kimi-k3-1-tpu-sglang-decode", eight)

    code, lines, _ = lint(run_cli, tmp_path, broken(TPU, edit))
    assert code == 1 and lines, lines
    assert "requests '8' chips (2 devices each) but pool tpu needs 8 devices per pod" in lines[0]
    assert lines[0].endswith("request 4, or change pools.tpu's parallelism")


def test_the_probes_port_is_not_the_launchers(tmp_path: Path, run_cli: Run) -> None:
    def edit(docs: list[dict[str, Any]]) -> None:
        def moved(c: dict[str, Any]) -> None:
            (port,) = [p for p in c["ports"] if p["name"] == "probes"]
            port["containerPort"] = 8091

        each_container(docs, "kimi-k3-1-gpu-vllm-decode", moved)

    code, lines, _ = lint(run_cli, tmp_path, broken(KIMI, edit))
    assert code == 1
    fields = [line.split(": ", 1)[1].split(":")[0] for line in lines]
    assert fields == [f"{probe}Probe.httpGet.port" for probe in ("startup", "liveness", "readiness")]
    assert "is 8091 but the launcher serves its probes on LLMD_PROBE_PORT 8090" in lines[0]


def test_the_startup_probe_gives_up_before_the_launchers_deadline(tmp_path: Path, run_cli: Run) -> None:
    def edit(docs: list[dict[str, Any]]) -> None:
        each_container(
            docs, "kimi-k3-1-gpu-vllm-decode", lambda c: c["startupProbe"].update(failureThreshold=700)
        )

    line = caught(run_cli, tmp_path, KIMI, edit)
    assert "startupProbe: gives up after 7000 s" in line
    assert "(LLMD_STARTUP_SECONDS 7180 + LLMD_PARK_SECONDS 600 + two periods of 10 s)" in line
    assert line.endswith("raise failureThreshold to 780, or lower LLMD_STARTUP_SECONDS to 6380")


WIDE_EP = ROOT / "deploy" / "wide-ep-deepseek-v4"


def set_env_of_every_role(docs: list[dict[str, Any]], **env: str) -> None:
    """Set `env` in every launcher container of the DisaggregatedSet's roles."""
    (ds,) = [d for d in docs if d["kind"] == "DisaggregatedSet"]
    for role in ds["spec"]["roles"]:
        for container in role["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]:
            given = [e for e in container["env"] if e["name"] not in env]
            container["env"] = given + [{"name": k, "value": v} for k, v in env.items()]


def test_the_600_s_a_disaggregatedset_pod_gives_up_is_its_parking(tmp_path: Path, run_cli: Run) -> None:
    """Why deploy/'s DisaggregatedSets (the guides' probes kept) run LLMD_STARTUP_SECONDS 600 s under
    the guide's probe budget (wide-EP 2098 s of 1 s x 2700): their roles are LWS groups, where a pod
    parks on bad input and holds its deadline while a peer parks, up to LLMD_PARK_SECONDS (600), time
    the kubelet's startup probe counts. At the guide's budget less two periods the probe would end a
    pod that parked, then loaded slowly, before the launcher could; without parking it is clean."""
    code, lines, _ = lint(
        run_cli, tmp_path, broken(WIDE_EP, lambda d: set_env_of_every_role(d, LLMD_STARTUP_SECONDS="2698"))
    )
    assert code == 1 and lines
    for line in lines:
        assert "startupProbe: gives up after 2700 s but the launcher's own deadline needs 3300 s" in line
        assert "(LLMD_STARTUP_SECONDS 2698 + LLMD_PARK_SECONDS 600 + two periods of 1 s)" in line
        assert line.endswith("raise failureThreshold to 3300, or lower LLMD_STARTUP_SECONDS to 2098")
    unparked = broken(
        WIDE_EP, lambda d: set_env_of_every_role(d, LLMD_STARTUP_SECONDS="2698", LLMD_PARK_SECONDS="0")
    )
    assert lint(run_cli, tmp_path, unparked)[:2] == (0, [])


def test_the_grace_period_is_not_the_launchers(tmp_path: Path, run_cli: Run) -> None:
    def edit(docs: list[dict[str, Any]]) -> None:
        for spec in templates(docs, "kimi-k3-1-gpu-vllm-decode"):
            spec["terminationGracePeriodSeconds"] = 60

    line = caught(run_cli, tmp_path, KIMI, edit)
    assert "terminationGracePeriodSeconds: is 60" in line
    assert "LLMD_GRACE_SECONDS is 90" in line and line.endswith("set LLMD_GRACE_SECONDS to 60")


def test_memory_below_the_plans_host_needs(tmp_path: Path, run_cli: Run) -> None:
    def edit(docs: list[dict[str, Any]]) -> None:
        each_container(
            docs, "kimi-k3-1-gpu-vllm-decode", lambda c: c["resources"]["limits"].update(memory="700Gi")
        )

    line = caught(run_cli, tmp_path, KIMI, edit)
    assert "resources.limits.memory: memory 700Gi" in line
    assert "pool decode's 816Gi (engine 96Gi, segments 656Gi, /dev/shm 64Gi; roles/memory.py)" in line


def test_dev_shm_below_the_recipes(tmp_path: Path, run_cli: Run) -> None:
    def edit(docs: list[dict[str, Any]]) -> None:
        for spec in templates(docs, "kimi-k3-1-gpu-vllm-decode"):
            (shm,) = [v for v in spec["volumes"] if v["name"] == "shm"]
            shm["emptyDir"]["sizeLimit"] = "16Gi"

    line = caught(run_cli, tmp_path, KIMI, edit)
    assert "volumes (/dev/shm): /dev/shm holds 16Gi" in line
    assert "host.shm is 64Gi" in line


def test_a_pool_the_recipe_does_not_have(tmp_path: Path, run_cli: Run) -> None:
    def edit(docs: list[dict[str, Any]]) -> None:
        def renamed(c: dict[str, Any]) -> None:
            (pool,) = [e for e in c["env"] if e["name"] == "LLMD_POOL"]
            pool["value"] = "decoder"

        each_container(docs, "kimi-k3-1-gpu-vllm-decode", renamed)

    line = caught(run_cli, tmp_path, KIMI, edit)
    assert "LLMD_POOL (--pool): recipe kimi-k3.1-pro has no pool 'decoder'" in line


def test_a_recipe_file_no_volume_provides(tmp_path: Path, run_cli: Run) -> None:
    def edit(docs: list[dict[str, Any]]) -> None:
        def unmounted(c: dict[str, Any]) -> None:
            c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "recipe"]

        each_container(docs, "kimi-k3-1-gpu-vllm-decode", unmounted)

    line = caught(run_cli, tmp_path, KIMI, edit)
    assert "volumeMounts: LLMD_RECIPE_FILE is /etc/llm-d-launcher/recipe.yaml" in line
    assert "but no volume is mounted at /etc/llm-d-launcher" in line


def test_a_config_map_without_the_recipes_key(tmp_path: Path, run_cli: Run) -> None:
    def edit(docs: list[dict[str, Any]]) -> None:
        (config_map,) = [d for d in docs if d["metadata"]["name"].startswith("kimi-k3-1-decode-recipe-")]
        config_map["data"] = {"recipe.yml": config_map["data"]["recipe.yaml"]}

    line = caught(run_cli, tmp_path, KIMI, edit)
    assert "volumes: ConfigMap kimi-k3-1-decode-recipe-" in line
    assert "has no key recipe.yaml" in line


def test_a_config_map_name_kustomize_did_not_rewrite(tmp_path: Path, run_cli: Run) -> None:
    """What a custom resource gets when kustomize has no nameReference for it: the generator's
    name without its hash, which no ConfigMap has; the pod would wait for it for ever."""

    def edit(docs: list[dict[str, Any]]) -> None:
        for spec in templates(docs, "kimi-k3-1-gpu-vllm-decode"):
            (volume,) = [v for v in spec["volumes"] if v["name"] == "recipe"]
            volume["configMap"]["name"] = "kimi-k3-1-decode-recipe"

    line = caught(run_cli, tmp_path, KIMI, edit)
    assert "mounts ConfigMap kimi-k3-1-decode-recipe, which this stream does not hold" in line
    assert "but a configMapGenerator's kimi-k3-1-decode-recipe-" in line


def test_service_links_left_on(tmp_path: Path, run_cli: Run) -> None:
    def edit(docs: list[dict[str, Any]]) -> None:
        for spec in templates(docs, "optimized-baseline-nvidia-gpu-vllm-decode"):
            del spec["enableServiceLinks"]

    line = caught(run_cli, tmp_path, BASELINE, edit)
    assert line.startswith(
        "Deployment/optimized-baseline-nvidia-gpu-vllm-decode spec.template container modelserver: "
    )
    assert "enableServiceLinks: is not false" in line


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("kind: [unclosed\n", "is not YAML at line 2"),
        ("- a\n- b\n", "is not a Kubernetes object"),
        (
            "kind: Deployment\nmetadata: {name: x}\nspec: {template: {spec: {containers: [5]}}}\n",
            "(AttributeError)",
        ),
        (
            "kind: LeaderWorkerSet\nmetadata: {name: x}\nspec: {leaderWorkerTemplate: [1]}\n",
            "(AttributeError)",
        ),
    ],
    ids=["not-yaml", "not-objects", "container-not-a-mapping", "template-not-a-mapping"],
)
def test_bad_input_is_one_line_and_exit_2(text: str, said: str, tmp_path: Path, run_cli: Run) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out, err = run_cli("lint", "-f", str(path))
    assert (code, out) == (2, "") and len(err.splitlines()) == 1 and said in err, err
    code, out, err = run_cli("lint", "-f", str(tmp_path / "missing.yaml"))
    assert (code, out) == (2, "") and "cannot be read (No such file or directory)" in err


def test_stdin_as_in_a_kustomize_pipeline() -> None:
    """`kubectl kustomize deploy/<path> | llm-d-launcher lint -f -`, the real entry point."""
    text = rendered(BASELINE).replace("enableServiceLinks: false", "enableServiceLinks: true")
    argv = [sys.executable, "-m", "launcher", "lint", "-f", "-"]
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run(argv, input=text, capture_output=True, text=True, check=False, cwd=ROOT, env=env)
    assert done.returncode == 1, done.stderr
    assert done.stdout.count("\n") == 1 and "enableServiceLinks: is not false" in done.stdout
    assert done.stderr.endswith("lint: 1 finding(s) in 1 launcher pod(s)\n")


def test_a_group_size_the_pool_does_not_span(tmp_path: Path, run_cli: Run) -> None:
    def edit(docs: list[dict[str, Any]]) -> None:
        (lws,) = [d for d in docs if d["metadata"]["name"] == "kimi-k3-1-gpu-vllm-prefill"]
        lws["spec"]["leaderWorkerTemplate"]["size"] = 3

    code, lines, _ = lint(run_cli, tmp_path, broken(KIMI, edit))
    assert code == 1 and len(lines) == 2, lines  # the leader's template and the workers'
    said = "LWS_GROUP_SIZE: is 3 but pool prefill of the recipe spans 2 pods per group"
    assert all(said in line and "set leaderWorkerTemplate.size: 2" in line for line in lines)
