"""One recipe ConfigMap per pool: an edit rolls only the pool it touches. Each pool's recipe file is
generated from the built-in recipe (its header and that pool alone, and its KV peers' identity, so the
whole recipe's cross-pool checks run on one file); every pod plans exactly as it does with the
built-in recipe; a
decode-only edit, rendered before and after with `kubectl kustomize`, changes decode's ConfigMap and
LeaderWorkerSet and nothing else (not prefill, not the Mooncake master, not the donors); the master is
replaced, never rolled beside itself."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.config.recipe_file import builtin_recipe_text
from tests.manifests import container_env, lws_env
from tests.unit.deploy.test_manifests import (
    DOCS,
    HASHED,
    NAMESPACE,
    WORKLOADS,
    kustomize,
    pod_env,
    pod_spec,
    recipe_generators,
)

ROOT = Path(__file__).resolve().parents[3]
RECIPE = "kimi-k3.1-pro"
SCRIPT = ROOT / "scripts" / "compile_recipes.py"


def compile_recipes() -> Any:
    """scripts/compile_recipes.py as a module: the generator of the one-pool files."""
    spec = importlib.util.spec_from_file_location("compile_recipes", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pool_files_are_generated_from_the_built_in_recipe() -> None:
    """Every recipe file a configMapGenerator of deploy/ mounts is one Kimi pool's file or a
    DisaggregatedSet path's whole recipe, as the generator writes it now; every Kimi pool has one."""
    script = compile_recipes()
    files = script.POOL_FILES[RECIPE]
    assert sorted(files) == sorted(split_pools(builtin_recipe_text(RECIPE)))
    generated = sorted(ROOT / f for f in [*files.values(), *script.RECIPE_FILES.values()])
    assert generated == sorted(p for _, p in recipe_generators().values())
    drifted = [f for pool, f in files.items() if (ROOT / f).read_text() != script.pool_file(RECIPE, pool)]
    drifted += [
        f for name, f in script.RECIPE_FILES.items() if (ROOT / f).read_text() != builtin_recipe_text(name)
    ]
    assert drifted == [], "edit launcher/config/recipes/, run scripts/compile_recipes.py"


def split_pools(text: str) -> list[str]:
    return list(compile_recipes().split_recipe(text)[1])


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        ('PYTHONHASHSEED: "42"', 'PYTHONHASHSEED: "7"', "PYTHONHASHSEED"),
        ("max-num-seqs: 32", "max-num-seqs: 32\n      block-size: 32", "args.block-size"),
    ],
    ids=["hash-seed", "block-size"],
)
def test_a_kv_identity_edit_in_one_shipped_pool_file_is_refused(
    tmp_path: Path, old: str, new: str, what: str, run_cli: Any
) -> None:
    """The whole recipe's check across KV peers, on what deploy/ mounts: decode's file alone, edited to
    disagree with prefill, plans rc 2 (it planned rc 0 before the files carried kv_peers), and the
    unedited file plans."""
    shipped = ROOT / compile_recipes().POOL_FILES[RECIPE]["decode"]
    env = {"LLMD_POOL": "decode"} | lws_env("decode-0.decode.llm-d", 4)
    edited = tmp_path / "recipe.yaml"
    for text, refused in ((shipped.read_text(), False), (shipped.read_text().replace(old, new, 1), True)):
        assert text.count(new if refused else old) >= 1
        edited.write_text(text)
        code, _, err = run_cli("plan", "--format", "json", env=env | {"LLMD_RECIPE_FILE": str(edited)})
        assert (code, f"disagree on {what}" in err) == ((2, True) if refused else (0, False)), err
        assert not refused or "kv_peers.prefill" in err


@pytest.mark.parametrize(("name", "doc"), WORKLOADS, ids=[name for name, _ in WORKLOADS])
def test_every_pod_plans_as_with_the_built_in_recipe(name: str, doc: dict[str, Any], run_cli: Any) -> None:
    """The pool's own file gives every pod of the group the plan the whole built-in recipe gives it."""
    container = pod_spec(doc)["containers"][0]
    env = pod_env(pod_spec(doc), container)
    argv = ["plan", "--format", "json"]
    if doc["kind"] == "LeaderWorkerSet":
        size = doc["spec"]["leaderWorkerTemplate"]["size"]
        leader = f"{doc['metadata']['name']}-0.{doc['metadata']['name']}.{NAMESPACE}"
        env |= lws_env(leader, size)
        argv.append("--group")
    code, from_file, err = run_cli(*argv, env=env)
    assert code == 0, err
    built_in = {k: v for k, v in env.items() if k != "LLMD_RECIPE_FILE"} | {"LLMD_RECIPE": RECIPE}
    code, from_built_in, err = run_cli(*argv, env=built_in)
    assert code == 0, err
    assert json.loads(from_file) == json.loads(from_built_in)


def _render(root: Path, base: Path, components: tuple[str, ...] = ()) -> dict[tuple[str, str], str]:
    """(kind, name without the hash suffix) -> the object as rendered, for a copy of deploy/ at root."""
    if components:
        own = root / "own"
        own.mkdir(exist_ok=True)
        (own / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": NAMESPACE,
            "resources": [os.path.relpath(base, own)],
            "components": [os.path.relpath(root / "components" / c, own) for c in components],
        }))  # fmt: skip
        base = own
    objects = {}
    for doc in (d for d in yaml.safe_load_all(kustomize(base)) if d):
        name = doc["metadata"]["name"]
        hashed = HASHED.match(name) if doc["kind"] == "ConfigMap" else None
        objects[(doc["kind"], hashed["name"] if hashed else name)] = yaml.safe_dump(doc, sort_keys=True)
    return objects


def changed_by_a_decode_edit(
    root: Path, base: Path, components: tuple[str, ...] = ()
) -> set[tuple[str, str]]:
    """Render, change one decode flag in the copy of deploy/ at root, render again: what differs."""
    before = _render(root, base, components)
    decode = root / "kimi-k3.1-pro" / "recipes" / "decode.yaml"
    text = decode.read_text()
    assert text.count("max-num-seqs: 32") == 1
    decode.write_text(text.replace("max-num-seqs: 32", "max-num-seqs: 64"))
    after = _render(root, base, components)
    assert before.keys() == after.keys()
    return {key for key in before if before[key] != after[key]}


@pytest.mark.parametrize(
    ("base", "components"),
    [("kimi-k3.1-pro", ()), ("overlays/gke-a4x-max", ("monitoring", "mooncake-donors"))],
    ids=["base", "overlay+monitoring+donors"],
)
def test_a_decode_edit_rolls_only_decode(tmp_path: Path, base: str, components: tuple[str, ...]) -> None:
    """Before: one ConfigMap for every pool, so this edit changed every workload (the master too)."""
    root = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", root)
    changed = changed_by_a_decode_edit(root, root / base, components)
    assert changed == {
        ("ConfigMap", "kimi-k3-1-decode-recipe"),
        ("LeaderWorkerSet", "kimi-k3-1-gpu-vllm-decode"),
    }


def test_under_the_disaggregated_set_a_decode_edit_changes_the_set(tmp_path: Path) -> None:
    """With components/disaggregated-set both roles live in one object: the decode edit changes it
    (and its controller's revision hash covers both roles: the pair rolls, docs/fleet.md); still not
    prefill's ConfigMap, the master or the donors."""
    root = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", root)
    changed = changed_by_a_decode_edit(
        root, root / "overlays/gke-a4x-max", ("mooncake-donors", "disaggregated-set")
    )
    assert changed == {("ConfigMap", "kimi-k3-1-decode-recipe"), ("DisaggregatedSet", "kimi-k3-1-gpu-vllm")}


def test_the_master_is_replaced_never_doubled_and_mounts_only_its_own_recipe() -> None:
    """Recreate: the old master stops before the new one starts (a RollingUpdate would run two, and
    clients would register with either). Its ConfigMap is mounted by no other workload."""
    mounted: dict[str, set[str]] = {}
    for _, doc in WORKLOADS:
        for volume in pod_spec(doc).get("volumes", []):
            generated = HASHED.match(volume.get("configMap", {}).get("name", ""))
            if generated:
                pool = container_env(pod_spec(doc)["containers"][0])["LLMD_POOL"]
                mounted.setdefault(generated["name"], set()).add(pool)
    assert all(len(pools) == 1 for pools in mounted.values()), mounted
    masters = [
        doc for _, doc in DOCS if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "mooncake-master"
    ]
    assert masters and all(doc["spec"]["strategy"] == {"type": "Recreate"} for doc in masters)
    assert all(doc["spec"]["replicas"] == 1 for doc in masters)
