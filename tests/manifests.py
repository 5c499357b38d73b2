"""A pod's env as its deploy/ manifest gives it, for every tier that plans or runs a pod of deploy/
(the unit tier's manifest tests, the images tier): literal values and downward-API fields filled as
the kubelet would, secrets left out; and the env LWS adds (launcher/contract/lws.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

import roles.manifest
from launcher.contract import lws
from roles.manifest import LWS_NAME_LABEL

ROOT = Path(__file__).resolve().parents[1]
# The pod a container's env is resolved for, as `llm-d-launcher lint` resolves it (roles/manifest.py).
EXAMPLE_POD = {"metadata": {"labels": {LWS_NAME_LABEL: "kimi-k3-1-gpu-vllm-decode"}}}
EXAMPLE_WORKLOAD = {"metadata": {"name": "pod-0", "namespace": "llm-d-kimi-k3-1"}}


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The env the container would see: literal values and downward-API fields (no secrets)."""
    return roles.manifest.container_env(EXAMPLE_WORKLOAD, EXAMPLE_POD, container)


def manifest_env(manifest: str) -> dict[str, str]:
    """The env of the first container of the one workload in a deploy/ file (its worker template for
    a LeaderWorkerSet), without LLMD_RECIPE_FILE: the caller mounts the recipe."""
    (doc,) = [d for d in yaml.safe_load_all((ROOT / manifest).read_text()) if d and "spec" in d]
    template = doc["spec"]["leaderWorkerTemplate"]["workerTemplate"] if "leaderWorkerTemplate" in doc[
        "spec"] else doc["spec"]["template"]  # fmt: skip
    env = container_env(template["spec"]["containers"][0])
    env.pop("LLMD_RECIPE_FILE", None)
    return env


def lws_env(leader: str, size: int, index: int = 0) -> dict[str, str]:
    """What LWS injects into pod `index` of a group of `size` led by `leader`."""
    return {lws.LEADER_ADDRESS: leader, lws.GROUP_SIZE: str(size), lws.WORKER_INDEX: str(index)}
