"""Preflight counts the accelerators the pod sees against its plan (launcher/supervise/host/
accelerators.py), run for real: `llm-d-launcher run` in a mount namespace of its own (unshare -rm)
whose /dev is a tmpfs holding device-named files, as a GPU or TPU container's runtime lays them out
(character devices there; mknod is not allowed in a user namespace, and the count reads names), and
a stand-in sysfs for the TPU chip's PCI id (LLMD_SYSFS_ROOT). A mismatch is exit 2 with one line
naming both numbers, nothing spawned; each refusal has a control that passes with the right count."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from tests.supervisor.test_host_preflight import launch
from tests.supervisor.test_host_preflight import recipe as host_recipe

needs_unshare = pytest.mark.skipif(not shutil.which("unshare"), reason="needs unshare")
pytestmark = needs_unshare


def private_dev(tmp: Path, names: list[str]) -> list[str]:
    """A wrapper running the launcher with a /dev of these names only (and /dev/null)."""
    dev = tmp / "dev"
    dev.mkdir()
    files = " ".join(shlex.quote(f"{dev}/{n}") for n in ["null", *names])
    setup = (
        f"mount -t tmpfs tmpfs {dev} && mkdir -p {dev}/vfio && touch {files} && "
        f"mount --bind /dev/null {dev}/null && mount --rbind {dev} /dev"
    )
    return ["unshare", "-rm", "sh", "-c", f'{setup} && exec "$@"', "sh"]


def recipe(tmp: Path, devices: int | None) -> Path:
    """One vLLM pod (the stand-in engine) with TP `devices` on as many devices; None: a CPU pool."""
    path = host_recipe(tmp)
    if devices:
        parallel = f"    gpus_per_node: {devices}\n    tensor_parallel: {devices}\n"
        path.write_text(path.read_text().replace("    tensor_parallel: 1\n", parallel))
    return path


def tpu_sysfs(tmp: Path, device_id: str) -> Path:
    """/sys/bus/pci/devices/<addr>/{vendor,device} of one Google TPU chip."""
    chip = tmp / "sys" / "bus" / "pci" / "devices" / "0000:00:04.0"
    chip.mkdir(parents=True)
    (chip / "vendor").write_text("0x1ae0\n")
    (chip / "device").write_text(f"{device_id}\n")
    return tmp / "sys"


def run_with(
    tmp: Path, devices: int | None, names: list[str], env: dict[str, str] | None = None
) -> tuple[int, str]:
    settings = {
        "LLMD_RECIPE_FILE": str(recipe(tmp, devices)),
        "LLMD_SYSFS_ROOT": str(tmp / "sys"),
        **(env or {}),
    }
    return launch(tmp, private_dev(tmp, names), settings, seconds=6)


def refusal(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("llm-d-launcher: error: accelerators: ")]


@pytest.mark.parametrize(
    ("names", "env", "seen", "how"),
    [
        (["nvidia0", "nvidiactl"], {}, 1, "(1 /dev/nvidia<N> devices)"),
        (["nvidia0", "nvidia1"], {"NVIDIA_VISIBLE_DEVICES": "GPU-8f6e1c2a-0d4b-4c8e-9e57-3b0f2d1e6a90"}, 1,
         "(NVIDIA_VISIBLE_DEVICES lists 1)"),
        (["nvidia0", "nvidia1"], {"NVIDIA_VISIBLE_DEVICES": "void"}, 0, "(NVIDIA_VISIBLE_DEVICES=void)"),
        ([], {}, 0, "(0 /dev/nvidia<N> devices)"),
    ],
    ids=["one-device-node", "one-uuid-listed", "void", "none"],
)  # fmt: skip
def test_fewer_gpus_than_the_plan_drives_are_refused(
    tmp_path: Path, names: list[str], env: dict[str, str], seen: int, how: str
) -> None:
    code, output = run_with(tmp_path, 2, names, env)
    assert code == 2, output
    (line,) = refusal(output)
    assert f"the pod sees {seen} {how} but pool p drives 2 per pod" in line
    assert "engine started" not in output and "spawned" not in output


@pytest.mark.parametrize(
    ("names", "env"),
    [
        (["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"], {}),
        (["nvidia0", "nvidia1"], {"NVIDIA_VISIBLE_DEVICES": "all"}),
        (["nvidia0", "nvidia1", "nvidia2"], {"NVIDIA_VISIBLE_DEVICES": "0,2"}),
    ],
    ids=["device-nodes", "all", "two-listed"],
)
def test_the_gpus_the_plan_drives_pass(tmp_path: Path, names: list[str], env: dict[str, str]) -> None:
    code, output = run_with(tmp_path, 2, names, env)
    assert not refusal(output) and code != 2, output


@pytest.mark.parametrize(
    ("device_id", "refused"), [("0x0076", False), ("0x006f", True)], ids=["tpu7x", "v6e"]
)
def test_tpu_chips_count_as_their_devices(tmp_path: Path, device_id: str, refused: bool) -> None:
    """Four chips in /dev/vfio: eight devices on TPU7x (two TensorCores each), four on v6e."""
    tpu_sysfs(tmp_path, device_id)
    code, output = run_with(tmp_path, 8, [f"vfio/{i}" for i in range(4)] + ["vfio/vfio"])
    if refused:
        assert code == 2, output
        (line,) = refusal(output)
        assert "the pod sees 4 (4 TPU chips in /dev (accel*, vfio/*)) but pool p drives 8 per pod" in line
    else:
        assert not refusal(output) and code != 2, output


def test_a_cpu_pool_is_not_counted(tmp_path: Path) -> None:
    code, output = run_with(tmp_path, None, [])
    assert not refusal(output) and code != 2, output
