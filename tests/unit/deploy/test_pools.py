"""One recipe ConfigMap per pool: an edit rolls only the pool it touches. Each pool's recipe file holds
the built-in recipe's header and that pool alone (together they are the built-in recipe, so its
cross-pool checks still hold); every pod plans exactly as it does with the built-in recipe; a
decode-only edit, rendered before and after with `kubectl kustomize`, changes decode's ConfigMap and
LeaderWorkerSet and nothing else (not prefill, not the Mooncake master, not the donors); the master is
replaced, never rolled beside itself."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.config.recipe_file import builtin_recipe_text
from tests.unit.deploy.test_manifests import (
    DOCS,
    HASHED,
    NAMESPACE,
    WORKLOADS,
    container_env,
    kustomize,
    pod_env,
    pod_spec,
    recipe_generators,
)

ROOT = Path(__file__).resolve().parents[3]
RECIPE = "kimi-k3.1-pro"
POOL_BLOCK = re.compile(r"(?m)^(?=  [a-z][a-z0-9.-]*:\n)")  # a pool's first line under `pools:`


def split_recipe(text: str) -> tuple[str, dict[str, str]]:
    """A recipe's text: what precedes `pools:`, and each pool's block as written (comments kept)."""
    head, pools = text.split("\npools:\n", 1)
    blocks = [b.rstrip("\n") for b in POOL_BLOCK.split(pools) if b.strip()]
    return head, {b.split(":", 1)[0].strip(): b for b in blocks}


def pool_file_problems(files: list[Path]) -> list[str]:
    """Each file must be the built-in recipe's header (its default_pool: the file's own pool) and one
    pool, word for word, and every pool of the built-in recipe must be in exactly one file."""
    head, pools = split_recipe(builtin_recipe_text(RECIPE))
    problems, seen = [], []
    for path in files:
        file_head, file_pools = split_recipe(path.read_text())
        if len(file_pools) != 1:
            problems.append(f"{path.name}: {len(file_pools)} pools, not one")
            continue
        ((pool, block),) = file_pools.items()
        seen.append(pool)
        if file_head != head.replace("default_pool: prefill", f"default_pool: {pool}"):
            problems.append(f"{path.name}: the header differs from the built-in recipe's")
        if block != pools.get(pool):
            problems.append(f"{path.name}: pools.{pool} differs from the built-in recipe's")
    if sorted(seen) != sorted(pools):
        problems.append(f"pools {sorted(seen)} in the files, {sorted(pools)} in the built-in recipe")
    return problems


def test_the_pool_recipes_add_up_to_the_built_in_recipe() -> None:
    """So the built-in recipe's load-time checks across pools (KV peers agree on seed, block size and
    model; one store protocol) hold for what deploy/ mounts, one pool per ConfigMap."""
    files = [path for _, path in recipe_generators().values()]
    assert len(files) == 5  # prefill, decode, master (base); tpu (tpu/); donor (its component)
    assert pool_file_problems(files) == []


def test_the_check_above_catches_a_drifted_or_doubled_pool_file(tmp_path: Path) -> None:
    """The control: a changed flag in one pool's file, or a file holding two pools, is caught."""
    files = [path for _, path in recipe_generators().values()]
    copies = []
    for path in files:
        copies.append(tmp_path / path.relative_to(ROOT).as_posix().replace("/", "_"))
        copies[-1].write_text(path.read_text())
    (decode,) = [c for c in copies if c.name.endswith("recipes_decode.yaml")]
    decode.write_text(decode.read_text().replace("max-num-seqs: 32", "max-num-seqs: 64"))
    assert pool_file_problems(copies) == [
        "deploy_kimi-k3.1-pro_recipes_decode.yaml: pools.decode differs from the built-in recipe's"
    ]
    both = tmp_path / "both.yaml"
    both.write_text(builtin_recipe_text(RECIPE))
    assert "both.yaml: 5 pools, not one" in pool_file_problems([*copies, both])


@pytest.mark.parametrize(("name", "doc"), WORKLOADS, ids=[name for name, _ in WORKLOADS])
def test_every_pod_plans_as_with_the_built_in_recipe(name: str, doc: dict[str, Any], run_cli: Any) -> None:
    """The pool's own file gives every pod of the group the plan the whole built-in recipe gives it."""
    container = pod_spec(doc)["containers"][0]
    env = pod_env(pod_spec(doc), container)
    argv = ["plan", "--format", "json"]
    if doc["kind"] == "LeaderWorkerSet":
        size = doc["spec"]["leaderWorkerTemplate"]["size"]
        leader = f"{doc['metadata']['name']}-0.{doc['metadata']['name']}.{NAMESPACE}"
        env |= {"LWS_LEADER_ADDRESS": leader, "LWS_GROUP_SIZE": str(size), "LWS_WORKER_INDEX": "0"}
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
