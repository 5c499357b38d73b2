"""The Mooncake donor's memlock preflight as its manifest ships it: the user and capabilities the
container runtime gives the process (deploy/components/mooncake-donors/mooncake-donor.yaml on
images/mooncake.Dockerfile), reproduced with setpriv under a memlock limit far below the 500 GB
segment. A non-root container whose IPC_LOCK is only in the bounding set (kubernetes/kubernetes#56374)
gets the message that says so."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DONOR = ROOT / "deploy" / "components" / "mooncake-donors" / "mooncake-donor.yaml"
DONOR_RECIPE = DONOR.parent / "recipe.yaml"  # its configMapGenerator's file (kustomization.yaml)
IMAGE = ROOT / "images" / "mooncake.Dockerfile"
# What containerd and CRI-O give a container before securityContext.capabilities (containerd
# pkg/oci/spec.go defaultUnixCaps, the OCI runtime-spec default).
RUNTIME_DEFAULT_CAPS = (
    "chown", "dac_override", "fsetid", "fowner", "mknod", "net_raw", "setgid", "setuid", "setfcap",
    "setpcap", "net_bind_service", "sys_chroot", "kill", "audit_write",
)  # fmt: skip
MEMLOCK = 8 << 20  # bytes, soft and hard: a common runtime default, and 1/60000 of the segment

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("prlimit"),
    reason="needs root, setpriv and prlimit",
)

# Build the donor's plan from the manifest's env and run the memlock part of the host preflight.
CHECK = """
import json, sys
from launcher.config.recipe_file import load_recipe
from launcher.config.settings import load_settings
from launcher.supervise.host.memory import check_memory
from roles import build_plan
settings = load_settings()
plan = build_plan(settings, load_recipe(settings.recipe_source))
json.dump([str(p) for name, p in check_memory(plan) if name == "memlock"], sys.stdout)
"""


def donor_container() -> dict[str, Any]:
    doc = yaml.safe_load(DONOR.read_text())
    (container,) = doc["spec"]["template"]["spec"]["containers"]
    assert container["image"].rsplit("/", 1)[1].startswith("llm-d-launcher-mooncake:")
    return dict(container)


def image_user() -> tuple[int, int]:
    uid, gid = re.findall(r"^USER (\d+):(\d+)$", IMAGE.read_text(), flags=re.M)[-1]
    return int(uid), int(gid)


def as_the_runtime_starts(security: dict[str, Any]) -> list[str]:
    """setpriv as a container runtime applies securityContext: the user (else the image's), the
    default capabilities plus `add` minus `drop` as the bounding set; root holds them all, a
    non-root process none (no ambient capabilities)."""
    uid, gid = image_user()
    uid, gid = security.get("runAsUser", uid), security.get("runAsGroup", gid)
    caps = security.get("capabilities", {})
    bounding = (set(RUNTIME_DEFAULT_CAPS) | {c.lower() for c in caps.get("add", [])}) - {
        c.lower() for c in caps.get("drop", [])
    }
    user = [f"--reuid={uid}", f"--regid={gid}", "--clear-groups"] if uid != 0 else []
    keep = ",".join(f"+{c}" for c in sorted(bounding))
    return ["setpriv", *user, "--inh-caps=-all", f"--bounding-set=-all,{keep}"]


def memlock_problems(container: dict[str, Any]) -> list[str]:
    env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    env["LLMD_RECIPE_FILE"] = str(DONOR_RECIPE)  # the manifest's mounted ConfigMap, made from this file
    env |= {"POD_IP": "10.64.0.10", "PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "HOME": "/"}
    prlimit = ["prlimit", f"--memlock={MEMLOCK}:{MEMLOCK}"]
    done = subprocess.run(
        [*prlimit, *as_the_runtime_starts(container.get("securityContext", {})), sys.executable, "-c", CHECK],
        env=env, capture_output=True, text=True, timeout=60, check=True, cwd="/",
    )  # fmt: skip
    problems: list[str] = json.loads(done.stdout)
    return problems


def test_the_donor_as_shipped_passes_its_memlock_preflight() -> None:
    assert memlock_problems(donor_container()) == []


def test_a_non_root_donor_is_told_its_ipc_lock_is_only_in_the_bounding_set() -> None:
    """The manifest as it was (the image's non-root user, IPC_LOCK added): the capability never
    reaches the process, and the message says that and both fixes."""
    container = donor_container()
    container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    (problem,) = memlock_problems(container)
    uid, _ = image_user()
    assert problem.startswith(
        "CAP_IPC_LOCK: is in the container's bounding set (securityContext.capabilities.add) but not in "
        f"the effective set, as the container runs as non-root user {uid} (kubernetes/kubernetes#56374); "
        "RLIMIT_MEMLOCK is 8.0 MiB (hard 8.0 MiB) but each engine process registers 500.0 GiB"
    ), problem
    assert "run the container as root (securityContext.runAsUser: 0)" in problem
    assert "setcap cap_ipc_lock+ep" in problem


def test_without_ipc_lock_at_all_the_plain_memlock_message_stays() -> None:
    container = donor_container()
    container["securityContext"] = {}
    (problem,) = memlock_problems(container)
    assert problem.startswith("RLIMIT_MEMLOCK: is 8.0 MiB (hard 8.0 MiB)") and "lacks CAP_IPC_LOCK" in problem
