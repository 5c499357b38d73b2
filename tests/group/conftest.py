"""Group tier: whole LWS groups on this machine through `llm-d-launcher local-group`, every pod in its
own network, UTS and mount namespace with its own IP on a bridge and the LWS DNS names in a private
/etc/hosts. `tests/test.sh group` runs this tier under `unshare -rnm` (user + network + mount namespaces
of the test run's own), so the bridge, the pods and their traffic exist only inside it, and the tests reach
every pod's IP through the bridge."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from launcher.localgroup.group import TAG
from tests.engines.conftest import build_tiny_model
from tests.engines.engine_venvs import VENVS, engine_env
from tests.pods import tagged

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def own_namespaces() -> None:
    interfaces = {line.split(":")[0].strip() for line in Path("/proc/net/dev").read_text().splitlines()[2:]}
    if interfaces != {"lo"} or os.geteuid() != 0:
        pytest.fail(
            "the group tier makes a bridge and namespaces: run it through `tests/test.sh group`, which "
            f"runs it under `unshare -rnm` (found interfaces {sorted(interfaces)}, euid {os.geteuid()})"
        )


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model (one KV head), shared by the modules that serve it."""
    return build_tiny_model(tmp_path_factory)


@pytest.fixture(scope="session")
def tp2_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with 2 KV heads: tensor parallelism over 2 ranks splits them."""
    return build_tiny_model(tmp_path_factory, "--kv-heads", "2")


def prefill_recipe(path: Path, model: Path, render: bool = True) -> Path:
    """The guide's prefill shape on CPU: `multinode`, TP across 2 pods, render sidecar on the leader
    (unless `render` is off: the group benchmark compares the engines alone), KV events with replay,
    prefix caching."""
    path.write_text(
        "name: tiny-group\n"
        f"model: {{path: {model}, served_name: tiny}}\n"
        "default_pool: prefill\n"
        "pools:\n"
        "  prefill:\n"
        "    kind: vllm\n"
        "    layout: multinode\n"
        "    nodes: 2\n"
        "    tensor_parallel: 2\n"
        "    port: 8000\n"
        "    args: {max-model-len: 512, dtype: float32, enforce-eager: true, enable-prefix-caching: true,\n"
        "           block-size: 32}\n"
        '    env: {VLLM_CPU_KVCACHE_SPACE: "1", PYTHONHASHSEED: "42"}\n'
        "    kv_events: {port: 5557, replay_port: 5567}\n" + ("    render: {port: 8089}\n" if render else "")
    )
    return path


@dataclass
class GroupRun:
    """One `llm-d-launcher local-group` run and what the tests ask of it."""

    workdir: Path
    proc: subprocess.Popen[str]
    started: float = field(default_factory=time.monotonic)

    def manifest(self) -> dict[str, Any]:
        """pods.json: the runner rewrites it when a pod exits (exit codes and times)."""
        path = self.workdir / "pods.json"
        deadline = time.monotonic() + 30
        while not path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no pods.json; runner exited {self.proc.poll()}:\n{self.output()}")
            time.sleep(0.1)
        data: dict[str, Any] = json.loads(path.read_text())
        return data

    def pods(self) -> list[dict[str, Any]]:
        pods: list[dict[str, Any]] = self.manifest()["pods"]
        return pods

    def output(self) -> str:
        return (self.workdir / "runner.out").read_text(errors="replace")

    def pod_output(self, index: int) -> str:
        return Path(self.pods()[index]["log"]).read_text(errors="replace")

    def termination(self, index: int) -> str:
        path = Path(self.pods()[index]["termination_log"])
        return path.read_text() if path.exists() else ""

    def probe(self, index: int, endpoint: str) -> tuple[int | None, dict[str, Any]]:
        pod = self.pods()[index]
        try:
            reply = httpx.get(f"http://{pod['ip']}:{pod['probe_port']}/{endpoint}", timeout=2)
        except httpx.HTTPError:
            return None, {}
        return reply.status_code, reply.json() if "json" in reply.headers.get("content-type", "") else {}

    def wait(self, what: str, condition: Any, timeout: float) -> float:
        """Poll until condition() is true; the seconds it took."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            if condition():
                return time.monotonic() - began
            if self.proc.poll() is not None and not condition():
                raise AssertionError(f"runner exited {self.proc.returncode} before {what}:\n{self.digest()}")
            time.sleep(0.25)
        raise AssertionError(f"not {what} within {timeout} s:\n{self.digest()}")

    def wait_ready(self, timeout: float = 420) -> float:
        count = len(self.pods())
        return self.wait(
            "ready", lambda: all(self.probe(i, "readyz")[0] == 200 for i in range(count)), timeout
        )

    def exit_code(self, index: int) -> int | None:
        code: int | None = self.pods()[index]["exit_code"]
        return code

    def exited_at(self, index: int) -> float:
        when: float = self.pods()[index]["exited_at"]
        return when

    def launcher(self, index: int) -> psutil.Process:
        return psutil.Process(self.pods()[index]["pid"])

    def engine(self, index: int) -> psutil.Process:
        """The pod's engine main process: the launcher's child running `vllm serve`."""
        for child in self.launcher(index).children():
            if "serve" in child.cmdline():
                return child
        raise AssertionError(f"pod {index} has no engine process")

    def stop(self, timeout: float = 90) -> int:
        """Ctrl-C to the runner: SIGTERM to every pod at once, as a group deletion."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=timeout)

    def digest(self) -> str:
        parts = [f"--- runner\n{self.output()[-3000:]}"]
        manifest = self.workdir / "pods.json"
        for pod in json.loads(manifest.read_text())["pods"] if manifest.exists() else []:
            log = Path(pod["log"])
            parts.append(
                f"--- {pod['name']}\n{log.read_text(errors='replace')[-4000:] if log.exists() else ''}"
            )
        return "\n".join(parts)


def leftovers(tag: str) -> list[psutil.Process]:
    """What a group run left behind: every pod's env carries the runner's tag."""
    return tagged(tag, TAG)


@pytest.fixture
def start_group(tmp_path: Path, own_namespaces: None) -> Iterator[Any]:
    runs: list[GroupRun] = []

    def start(recipe: Path, *args: str, env: dict[str, str] | None = None) -> GroupRun:
        workdir = tmp_path / f"group{len(runs)}"
        workdir.mkdir()
        pod_env = {
            **engine_env(workdir),
            "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
            "PYTHONPATH": str(REPO),
            "LLMD_BIN_PATH": str(VENVS / "vllm" / "bin"),
            "LLMD_LOG_FORMAT": "text",
            "LLMD_RECIPE_FILE": str(recipe),
            **(env or {}),
        }
        out = open(workdir / "runner.out", "w")  # noqa: SIM115 - the runner writes it until it exits
        proc = subprocess.Popen(
            [sys.executable, "-m", "launcher", "local-group", "--no-unshare", "--workdir", str(workdir),
             "--status-every", "10", *args],
            env=pod_env, stdout=out, stderr=subprocess.STDOUT, text=True, cwd=workdir,
        )  # fmt: skip
        run = GroupRun(workdir, proc)
        runs.append(run)
        return run

    yield start
    for run in runs:
        if run.proc.poll() is None:
            run.proc.send_signal(signal.SIGINT)
            try:
                run.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                run.proc.kill()
                run.proc.wait()


@pytest.fixture(scope="session")
def moe_flagged_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny dense model whose config.json also says `num_local_experts: 4`: vLLM 0.32 then accepts
    the DP supervisor and expert parallelism for it (tests/engines/tiny_model.py says why)."""
    return build_tiny_model(tmp_path_factory, "--local-experts", "4")


def decode_recipe(path: Path, model: Path) -> Path:
    """The guide's decode shape on CPU: two pods x 2 local DP ranks (DP=4, EP=4) behind vLLM's DP
    supervisor, the disagg sidecar in front (8000+i -> 8200+i)."""
    path.write_text(
        "name: tiny-decode\n"
        f"model: {{path: {model}, served_name: tiny}}\n"
        "default_pool: decode\n"
        "pools:\n"
        "  decode:\n"
        "    kind: vllm\n"
        "    layout: data-parallel\n"
        "    nodes: 2\n"
        "    data_parallel_local: 2\n"
        "    port: 8200\n"
        "    supervisor_port: 8208\n"
        "    dp_rpc_port: 5555\n"
        "    args: {max-model-len: 512, dtype: float32, enforce-eager: true, enable-expert-parallel: true,\n"
        "           block-size: 32}\n"
        '    env: {VLLM_CPU_KVCACHE_SPACE: "1", PYTHONHASHSEED: "42"}\n'
        "    disagg_sidecar: {port: 8000, kv_connector: nixlv2, args: {secure-proxy: false}}\n"
    )
    return path


def tpu_recipe(path: Path, model: Path) -> Path:
    """The guide's TPU shape (SGLang, one engine across the hosts of a slice) scaled to 2 hosts of 1
    device each, on CPU. The guide's flags stay, except two that cannot run on a CPU without Intel AMX,
    both failing about 20 s into start-up after the flags parsed (SGLang 0.5.23):
    - kv-cache-dtype fp8_e4m3: "CPU FP8 KV cache requires Intel AMX support";
    - enable-hierarchical-cache: its host pool registers memory with CUDA.
    context-length 491520 becomes 512 (the tiny model's; the long one needs
    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 and far more memory). The CPU flags and env come from
    SGLang's CPU engine: --device cpu needs SGLANG_USE_CPU_ENGINE=1; NCCL is made unloadable
    (SGLANG_NCCL_SO_PATH) so TP goes over gloo; sgl_kernel is the stand-in on the engine's PYTHONPATH
    (tests/standins/sgl_kernel, installed beside the venv by scripts/install-engines.sh sglang-full)."""
    path.write_text(
        "name: tiny-tpu\n"
        f"model: {{path: {model}, served_name: tiny}}\n"
        "default_pool: tpu\n"
        "pools:\n"
        "  tpu:\n"
        "    kind: sglang\n"
        "    nodes: 2\n"
        "    tensor_parallel: 2\n"
        "    port: 30000\n"
        "    dist_init_port: 20000\n"
        "    args:\n"
        "      ep-size: 2\n"
        "      context-length: 512\n"
        "      page-size: 128\n"
        "      hicache-ratio: 2\n"
        "      grammar-backend: none\n"
        "      tool-call-parser: kimi_k3\n"
        "      reasoning-parser: kimi_k3\n"
        "      device: cpu\n"
        "      attention-backend: torch_native\n"
        "      disable-cuda-graph: true\n"
        "      mem-fraction-static: 0.1\n"
        "      max-total-tokens: 8192\n"
        "    env:\n"
        '      SGLANG_USE_CPU_ENGINE: "1"\n'
        "      SGLANG_NCCL_SO_PATH: /nonexistent/libnccl.so.2\n"
        f"      PYTHONPATH: {VENVS / 'sglang-full' / 'standins'}\n"
    )
    return path


SIDECAR = "    disagg_sidecar: {port: 8000, kv_connector: nixlv2, args: {secure-proxy: false}}\n"


def pd_recipe(path: Path, model: Path, decode_seed: str = "42", prefill_ranks: int = 2) -> Path:
    """The guide's P/D shape scaled to one prefill and one decode engine of the tiny model: the Kimi
    recipe's connectors and roles (prefill MultiConnector kv_both = NIXL kv_producer + MooncakeStore
    kv_both; decode MultiConnector kv_consumer = NIXL kv_consumer + MooncakeStore kv_consumer), its NIXL
    side channel (5600 + global DP rank), the same PYTHONHASHSEED on both, and a Mooncake master as a
    Service. No UCX or NIXL env: the launcher derives it. What a CPU recipe states that Kimi's does not:
    the store's `protocol: tcp` (no RDMA here) and `local_buffer_size` (vLLM's 4 GiB default is more than
    this machine spares two engines); Kimi's decode layout is data-parallel behind the DP supervisor,
    which needs >= 2 ranks per pod: here one engine, the sidecar in front of it all the same. Prefill has
    `prefill_ranks` DP ranks behind vLLM's own API server (layout data-parallel, no supervisor), so a
    rank > 0 listens on its own side channel (5600 + rank) and decode must dial that one."""
    store = (
        '{master_server_address: "mooncake-master:8700",'
        ' metadata_server: "http://mooncake-master:8080/metadata",'
        ' protocol: tcp, device_name: "", global_segment_size: 256MB, local_buffer_size: 128MB}'
    )

    def pool(port: int, role: str, nixl: str, store_role: str, seed: str, extra: str) -> str:
        return (
            "    kind: vllm\n"
            "    nodes: 1\n"
            "    tensor_parallel: 1\n"
            f"    port: {port}\n"
            "    args:\n"
            "      {max-model-len: 512, dtype: float32, enforce-eager: true, enable-prefix-caching: true,\n"
            "       block-size: 32, kv-transfer-config: {kv_connector: MultiConnector, "
            f"kv_role: {role},\n"
            "         kv_connector_extra_config: {connectors: [\n"
            f"           {{kv_connector: NixlConnector, kv_role: {nixl}}},\n"
            f"           {{kv_connector: MooncakeStoreConnector, kv_role: {store_role}}}]}}}}}}\n"
            f'    env: {{VLLM_CPU_KVCACHE_SPACE: "1", PYTHONHASHSEED: "{seed}"}}\n'
            "    kv_events: {port: 5557}\n"
            "    nixl: {side_channel_port: 5600}\n"
            f"    mooncake_store: {{config: {store}}}\n" + extra
        )

    layout = (
        f"    layout: data-parallel\n    data_parallel_local: {prefill_ranks}\n" if prefill_ranks > 1 else ""
    )
    path.write_text(
        "name: tiny-pd\n"
        f"model: {{path: {model}, served_name: tiny}}\n"
        "default_pool: decode\n"
        "pools:\n"
        "  prefill:\n" + pool(8000, "kv_both", "kv_producer", "kv_both", "42", layout) +
        "  decode:\n" + pool(8200, "kv_consumer", "kv_consumer", "kv_consumer", decode_seed, SIDECAR) +
        "  mooncake-master:\n"
        "    kind: mooncake-master\n"
        "    port: 8700\n"
        "    http_metadata_port: 8080\n"
        "    metrics_port: 9003\n"
    )  # fmt: skip
    return path
