"""How many accelerator devices does this pod see? A pod given fewer GPUs than its engine's parallelism
(a limit edited in an overlay, a device plugin that handed out fewer) fails only in the engine's
distributed init, after the image pull and minutes of loading; more is a node's devices idle.

NVIDIA: the container runtime exposes the GPUs NVIDIA_VISIBLE_DEVICES names (a list of indices or
UUIDs; `all`; `none` or `void`: none; NVIDIA Container Toolkit docs, "Environment variables (OCI
spec)"), as /dev/nvidia<N> nodes; unset, empty, `all` or a path list (the device plugin's
volume-mounts strategy) leaves the /dev nodes to count.
TPU: one /dev/accel<N> (v2-v4) or /dev/vfio/<N> (v5e, v5p, v6e, TPU7x) per chip, and a TPU7x or
v2/v3 chip is two devices to the engine, known by its PCI device id under /sys/bus/pci/devices (vendor
0x1ae0) (AI-Hypercomputer/cloud-accelerator-diagnostics tpu_info/tpu_info/device.py: chip_path,
TpuChip.devices_per_chip, from_pci_device_id).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from launcher.contract.errors import Problem
from launcher.contract.plan import Plan

_NVIDIA = re.compile(r"nvidia[0-9]+")
_NUMBERED = re.compile(r"[0-9]+")
_TPU_VENDOR = "0x1ae0"
_TWO_DEVICE_CHIPS = ("0x0076", "0x0027")  # TPU7x; v2 and v3 (one device id)


def visible_devices(
    environ: Mapping[str, str], dev_root: str = "/dev", sysfs_root: str = "/sys"
) -> tuple[int, str]:
    """The accelerator devices the pod sees, and how that was counted (for the error line)."""
    dev = Path(dev_root)
    chips = _count(dev, re.compile(r"accel[0-9]+")) + _count(dev / "vfio", _NUMBERED)
    if chips:
        per_chip = _devices_per_tpu_chip(Path(sysfs_root))
        devices = f" x {per_chip} devices each" if per_chip > 1 else ""
        return chips * per_chip, f"{chips} TPU chips in {dev_root} (accel*, vfio/*){devices}"
    nodes = _count(dev, _NVIDIA)
    said = environ.get("NVIDIA_VISIBLE_DEVICES", "").strip()
    if said in ("none", "void"):
        return 0, f"NVIDIA_VISIBLE_DEVICES={said}"
    if said and said != "all" and not said.startswith("/"):
        listed = [d for d in said.split(",") if d.strip()]
        return len(listed), f"NVIDIA_VISIBLE_DEVICES lists {len(listed)}"
    return nodes, f"{nodes} {dev_root}/nvidia<N> devices"


def _count(directory: Path, name: re.Pattern[str]) -> int:
    try:
        return sum(1 for entry in directory.iterdir() if name.fullmatch(entry.name))
    except OSError:
        return 0


def _devices_per_tpu_chip(sysfs: Path) -> int:
    for device in (sysfs / "bus" / "pci" / "devices").glob("*"):
        try:
            if (device / "vendor").read_text().strip() != _TPU_VENDOR:
                continue
            return 2 if (device / "device").read_text().strip() in _TWO_DEVICE_CHIPS else 1
        except OSError:
            continue
    return 1


def check_accelerators(
    plan: Plan, environ: Mapping[str, str], dev_root: str = "/dev", sysfs_root: str = "/sys"
) -> list[Problem]:
    """The devices the pod sees against the devices its plan drives; a pool with no accelerator
    expectation (a CPU recipe: no gpus_per_node) is not checked."""
    wanted = plan.needs.accelerators
    if wanted is None:
        return []
    seen, how = visible_devices(environ, dev_root, sysfs_root)
    if seen == wanted:
        return []
    return [
        Problem(
            "accelerators",
            f"the pod sees {seen} ({how}) but pool {plan.role.pool} drives {wanted} per pod",
            f"give the pod {wanted} (resources.limits nvidia.com/gpu; google.com/tpu counts chips, two "
            f"devices each on TPU7x), or change pools.{plan.role.pool}'s parallelism and gpus_per_node",
        )
    ]
