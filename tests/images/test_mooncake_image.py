"""images/mooncake.Dockerfile (on the Debian Python base): a real mooncake_master and a DRAM donor
that registers its segment with it, each under the launcher as PID 1, run as deploy/ runs them (the
master as the image's user 10001, the donor as root with IPC_LOCK), in a network namespace of the
test's own; both stop with exit 0."""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.images.conftest import MOONCAKE_IMAGE, POD_IP, MakeContainer, planned
from tests.images.podman import Container, podman
from tests.mooncake_recipe import mooncake_recipe
from tests.polling import wait_for

RECIPE = mooncake_recipe()
GET = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"


def get_in(pod: Container) -> Callable[[str], str | None]:
    """GET inside the pod's network namespace (the test's own), by the pod's own python3."""

    def get(url: str) -> str | None:
        done = pod.exec("python3", "-c", GET, url, timeout=30)
        return done.stdout if done.returncode == 0 else None

    return get


def test_plan_prints_the_master_pods_plan(container: MakeContainer) -> None:
    env = {"LLMD_POOL": "mooncake-master", "POD_IP": "10.1.2.3", "POD_NAME": "kimi-k3-1-mooncake-master-0"}
    out = planned(container, MOONCAKE_IMAGE, "deploy/kimi-k3.1-pro/recipes/mooncake-master.yaml", env)
    assert out.startswith("# recipe kimi-k3.1-pro | pool mooncake-master | role mooncake-master")
    assert "mooncake_master\n      --port=8700" in out


def test_real_master_and_donor_register_and_stop_with_exit_0(
    container: MakeContainer, pod_network: str
) -> None:
    env = {"POD_IP": POD_IP, "LLMD_GRACE_SECONDS": "30"}
    master = container(MOONCAKE_IMAGE, RECIPE, {**env, "LLMD_POOL": "master"}, [f"--network={pod_network}"])
    donor = container(
        MOONCAKE_IMAGE,
        RECIPE,
        # Its own probe port: the two pods share the test's one network namespace (in a cluster each
        # pod has its own), and a second listener on 8090 is refused by the donor's preflight.
        {**env, "LLMD_POOL": "donor", "LLMD_PROBE_PORT": "8091"},
        [f"--network={pod_network}", "--user=0:0", "--cap-add=IPC_LOCK"],  # mooncake-donor.yaml's
    )
    master.start()
    master.wait_ready(timeout=60)
    donor.start()
    donor.wait_ready(timeout=60)
    summary = wait_for(
        "http://127.0.0.1:9003/metrics/summary",
        get_in(master),
        lambda: bool(master.state()["Running"]),
        master.logs,
        r"/ 256\.00 MB.*Clients: 1",
        timeout=60,
    )
    print(summary.strip())
    assert "Mem Storage: 0 B / 256.00 MB" in summary
    for pod in (donor, master):
        started = time.monotonic()
        podman("stop", "-t", "30", pod.name, timeout=60)
        code = pod.state()["ExitCode"]
        print(f"{pod.name}: podman stop to exit {code} in {time.monotonic() - started:.1f} s")
        assert code == 0, pod.logs()[-3000:]
    assert '"process": "mooncake-master"' in master.logs()  # the binary's own lines, passed through, named
    assert '"reason": "stopped by SIGTERM"' in master.logs().strip().splitlines()[-1]
