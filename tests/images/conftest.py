"""Images tier fixtures: the images tests/images/build.sh built, containers run as deploy/'s
manifests run them, a network namespace this tier makes for the pods that need a pod IP, and the tiny
model (tests/engines/tiny_model.py, run in the vLLM image's own Python)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.images.podman import PREFIX, REPO, Container, podman

# images/targets.txt's names, in its order: tests/images/build.sh builds every one as PREFIX/<name>:run.
TARGETS = [
    line.split()[0]
    for line in (REPO / "images" / "targets.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]
VLLM_IMAGE = f"{PREFIX}/vllm-gpu-kimi:run"  # Kimi's prefill and decode pods (MooncakeStore, NIXL, sidecar)
MOONCAKE_IMAGE = f"{PREFIX}/mooncake:run"
SGLANG_IMAGE = f"{PREFIX}/sglang-tpu:run"
POD_IP = "10.213.0.1"  # llmd0 in tests/engines/private_network.sh, inside pod_network's namespace

# As deploy/'s manifests run the containers: a private PID namespace (the launcher is PID 1, the
# kubelet's default), /dev/shm a tmpfs (the manifests' `shm` emptyDir, medium Memory), the recipe
# ConfigMap read-only at /etc/llm-d-launcher, the kubelet's termination message file, and no network
# unless the test made one. The root filesystem read-only: no manifest needs to write to it.
POD = ["--pid=private", "--read-only", "--tmpfs", "/dev/shm:rw,size=512m"]
RUN_AS_IMAGE_USER = ["--user", "10001:10001"]  # runAsNonRoot with a fixed UID (the Mooncake image's)

MakeContainer = Callable[..., Container]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.images)


@pytest.fixture
def container(tmp_path: Path) -> Iterator[MakeContainer]:
    """make(image, recipe_text, env, options=..., argv=...): a container of `image` with the recipe
    mounted where the manifests mount it (None: the manifest names a built-in recipe) and a
    termination-message file, removed after the test."""
    made: list[Container] = []

    def make(
        image: str,
        recipe: str | None,
        env: dict[str, str],
        options: list[str] | None = None,
        argv: list[str] | None = None,
    ) -> Container:
        folder = tmp_path / f"pod{len(made)}"
        (folder / "recipe").mkdir(parents=True)
        log = folder / "termination-log"
        log.touch(mode=0o666)
        log.chmod(0o666)  # the kubelet's file: writable by whatever user the container runs as
        mounts = ["-v", f"{log}:/dev/termination-log"]
        settings = dict(env)
        if recipe is not None:
            (folder / "recipe" / "recipe.yaml").write_text(recipe)
            mounts += ["-v", f"{folder / 'recipe'}:/etc/llm-d-launcher:ro"]
            settings["LLMD_RECIPE_FILE"] = "/etc/llm-d-launcher/recipe.yaml"
        env_options = [f"--env={key}={value}" for key, value in settings.items()]
        made.append(Container(image, [*POD, *mounts, *env_options, *(options or [])], argv or [], log))
        return made[-1]

    yield make
    for each in made:
        each.remove()


@pytest.fixture(scope="session")
def pod_network() -> Iterator[str]:
    """`--network ns:PATH` for pods that need a pod IP (Mooncake binds every interface and advertises
    POD_IP): a network namespace of this tier's own (lo + a veth pair, tests/engines/private_network.sh),
    held open by a sleeping process; nothing in it is reachable from outside."""
    holder = subprocess.Popen(
        ["unshare", "--net", "bash", str(REPO / "tests/engines/private_network.sh"), "sleep", "infinity"]
    )
    try:
        path = f"/proc/{holder.pid}/ns/net"
        addresses = ["nsenter", f"--net={path}", "ip", "-o", "addr"]
        deadline = time.monotonic() + 10
        while "llmd0" not in subprocess.run(addresses, capture_output=True, text=True, check=False).stdout:
            assert time.monotonic() < deadline, "the namespace never got its address"
            time.sleep(0.1)
        yield f"ns:{path}"
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/engines/tiny_model.py's model, built with the vLLM image's own torch and transformers."""
    out = tmp_path_factory.mktemp("tiny-model")
    out.chmod(0o777)
    builder = REPO / "tests/engines/tiny_model.py"
    podman(
        "run", "--rm", "--network=none", "--entrypoint", "python3",
        "-v", f"{builder}:/opt/tiny_model.py:ro", "-v", f"{out}:/out", "--env=HF_HUB_OFFLINE=1",
        VLLM_IMAGE, "/opt/tiny_model.py", "/out",
        timeout=300,
    )  # fmt: skip
    return out


def planned(container: MakeContainer, image: str, pool_recipe: str, env: dict[str, str]) -> str:
    """What `plan` prints in `image` for a pod whose pool recipe (a deploy/ file, as its ConfigMap
    mounts it) and env are given, with no network."""
    recipe = (REPO / pool_recipe).read_text()
    pod = container(image, recipe, env, ["--network=none"], ["plan"]).start()
    assert pod.wait_exit(timeout=60) == 0, pod.logs()[-3000:]
    out = pod.logs()
    print(out[:1500])
    return out
