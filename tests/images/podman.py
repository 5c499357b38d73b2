"""podman, as the images tier drives it: the tier's containers.conf (tests/images/env.sh), every
container removed after its test, and a container's view of itself read with `podman exec` (the images
have no network reachable from here: --network=none, or a namespace the test made)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREFIX = os.environ.get("LLMD_IMAGE_PREFIX", "localhost/llm-d-launcher-test")
REPO = Path(__file__).resolve().parents[2]


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    if "CONTAINERS_CONF" not in os.environ:
        raise RuntimeError("run the images tier through `tests/test.sh images` (it sets CONTAINERS_CONF)")
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return done


def inspect_image(image: str) -> dict[str, Any]:
    data: list[dict[str, Any]] = json.loads(podman("image", "inspect", image).stdout)
    return data[0]


@dataclass
class Container:
    """One `podman run -d` of an image. `options`: podman run's (user, caps, mounts, network);
    `argv`: the image's command (its ENTRYPOINT is llm-d-launcher)."""

    image: str
    options: list[str]
    argv: list[str] = field(default_factory=list)
    termination_log: Path | None = None  # the host file mounted at /dev/termination-log
    name: str = field(default_factory=lambda: f"llmd-test-{uuid.uuid4().hex[:10]}")
    started: float = 0.0

    def start(self) -> Container:
        podman("run", "-d", "--name", self.name, *self.options, self.image, *self.argv)
        self.started = time.monotonic()
        return self

    def exec(self, *argv: str, timeout: float = 60, user: str = "") -> subprocess.CompletedProcess[str]:
        as_user = ["--user", user] if user else []
        return podman("exec", *as_user, self.name, *argv, timeout=timeout, check=False)

    def state(self) -> dict[str, Any]:
        data: list[dict[str, Any]] = json.loads(podman("inspect", self.name).stdout)
        return dict(data[0]["State"])

    def logs(self) -> str:
        done = podman("logs", self.name, check=False)
        return done.stdout + done.stderr

    def wait_ready(self, timeout: float) -> float:
        """Seconds from start until `llm-d-launcher probe ready` (the manifests' readiness probe
        command, run inside the container) passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.state()["Running"]:
                raise AssertionError(f"container exited {self.state()['ExitCode']}:\n{self.logs()[-5000:]}")
            if self.exec("llm-d-launcher", "probe", "ready", timeout=30).returncode == 0:
                return time.monotonic() - self.started
            time.sleep(0.5)
        raise AssertionError(f"not ready within {timeout} s:\n{self.logs()[-5000:]}")

    def wait_exit(self, timeout: float) -> int:
        code = podman("wait", self.name, timeout=timeout).stdout.strip()
        return int(code)

    def remove(self) -> None:
        podman("rm", "-f", "-t", "0", self.name, check=False)
