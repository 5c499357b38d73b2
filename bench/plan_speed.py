"""How fast does `llm-d-launcher plan` answer, compared with what it cannot beat and with vLLM?

`plan` is the dry-run an operator (or a CI check) runs to see the exact engine commands a pod would
run. It should feel instant. Goals: plan <= 1.15x importing pydantic-settings alone (the floor: the
settings layer it must load), and plan <= 3x a bare interpreter start. This script times fresh
processes side by side in one run, so every row sees the same machine, load and page cache:

  1. bare interpreter start (baseline)      4. `plan --pool decode --group --format json`
  2. `import pydantic_settings` (the floor)  5. vLLM's own parser + validation on the same argv
  3. `plan` (default recipe)                 6. the floor without the interpreter's teardown

`plan` ends without the interpreter's teardown (launcher/cli.py `_exit_now`), which the floor pays:
row 6 is the floor on the same terms, so `plan` / row 6 is the launcher's own work alone.

Stdlib only; run with any python3 >= 3.10:  python3 bench/plan_speed.py [--write bench/results/plan_speed.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Cold import + parse + validate, as an operator pays it; the 0.33 / 0.32 import paths differ.
VLLM_PARSE = """\
import json, sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
try:
    from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
except ImportError:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
args = make_arg_parser(FlexibleArgumentParser(prog="vllm serve")).parse_args(json.loads(sys.argv[1]))
validate_parsed_serve_args(args)
"""


@dataclass
class Row:
    label: str
    argv: list[str]
    runs: int
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # user + system seconds of the process, per run
    error: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)

    @property
    def p90(self) -> float:
        ordered = sorted(self.times)
        return ordered[max(0, -(-9 * len(ordered) // 10) - 1)]  # nearest-rank


FLOOR_GOAL = 1.15  # plan / import pydantic_settings
BARE_GOAL = 3.0  # plan / bare interpreter


def clean_env() -> dict[str, str]:
    """The environment minus pod/LWS settings, so `plan` plans the default recipe; this checkout
    first on the path (the venv's install may point at another); bytecode written by the warm-up
    run, as an installed wheel has it (pip compiles on install) and as the floor row's library has."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LWS_", "LLMD_")) and k != "POD_IP"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_once(row: Row) -> tuple[float, float] | None:
    """Wall and CPU seconds of one fresh process; None (and row.error set) if it failed. On a loaded
    machine the wall time is mostly waiting for a core; the CPU time is the process's own work."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        row.argv, env=row.env, cwd=row.cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        last = (done.stderr.decode(errors="replace").strip().splitlines() or [""])[-1]
        row.error = f"exit {done.returncode}: {last}".replace("|", "/")
        return None
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(rows: list[Row]) -> list[float]:
    """One untimed warm-up run per row (page cache, bytecode cache), then timed runs round-robin,
    so a burst of load on the machine is spread over all rows instead of skewing one. Returns the
    1-minute load average after each round."""
    for row in rows:
        if not row.error:
            print(f"warm-up {row.label}", file=sys.stderr)
            run_once(row)
    load = []
    for i in range(max(row.runs for row in rows)):
        print(f"round {i + 1}", file=sys.stderr)
        for row in rows:
            if not row.error and i < row.runs and (took := run_once(row)) is not None:
                row.times.append(took[0])
                row.cpu.append(took[1])
        load.append(os.getloadavg()[0])
    return load


def engine_argv(launcher: str, env: dict[str, str]) -> list[str]:
    """processes[0].argv of `plan --format json`, without the leading `vllm serve`."""
    out = subprocess.run([launcher, "plan", "--format", "json"], env=env, capture_output=True, check=True)
    argv: list[str] = json.loads(out.stdout)["processes"][0]["argv"]
    assert argv[:2] == ["vllm", "serve"], argv[:2]
    return argv[2:]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def ratio(row: Row, base: Row) -> str:
    return f"{row.median / base.median:.2f}" if row.times and base.times else "-"


def cpu_ratio(row: Row, base: Row) -> str:
    return f"{row.cpu_median / base.cpu_median:.2f}" if row.cpu and base.cpu else "-"


def table(rows: list[Row]) -> list[str]:
    bare, floor = rows[0], rows[1]
    lines = [
        "| # | command | runs | median ms | p90 ms | min ms | x bare python | x floor ¹ "
        "| CPU median ms | CPU x floor |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, row in enumerate(rows, 1):
        if row.error:
            lines.append(f"| {n} | {row.label} | - | - | - | - | {row.error} | - | - | - |")
            continue
        lines.append(
            f"| {n} | {row.label} | {len(row.times)} | {ms(row.median)} | {ms(row.p90)} | "
            f"{ms(min(row.times))} | {ratio(row, bare)} | {ratio(row, floor)} "
            f"| {ms(row.cpu_median)} | {cpu_ratio(row, floor)} |"
        )
    return lines


def goal(name: str, row: Row, base: Row, limit: float) -> str:
    if row.error or base.error:
        return f"**Goal: {name} ≤ {limit:g}x — cannot tell** (a row failed)."
    value = row.median / base.median
    cpu = row.cpu_median / base.cpu_median
    # Both: on a loaded machine the wall ratio is mostly waiting for a core and can hide own work.
    verdict = "MET" if value <= limit and cpu <= limit else "NOT MET"
    return (
        f"**Goal: {name} ≤ {limit:g}x — {verdict}** (median ratio {value:.2f}x; "
        f"of CPU time {cpu:.2f}x, {'met' if cpu <= limit else 'not met'})."
    )


def summary(rows: list[Row], load: list[float]) -> list[str]:
    bare, floor, plan, _group, vllm, quick_floor = rows[:6]
    lines = [
        "",
        goal("`plan` / `import pydantic_settings` (row 3 / row 2)", plan, floor, FLOOR_GOAL),
        "",
        goal(
            "the launcher's own work: `plan` / the floor without teardown (row 3 / row 6)",
            plan,
            quick_floor,
            FLOOR_GOAL,
        ),
        "",
        goal("`plan` / bare interpreter start (row 3 / row 1)", plan, bare, BARE_GOAL),
        "",
        f"Machine load during the runs (1-minute load average, {len(os.sched_getaffinity(0))} cores): "
        f"median {statistics.median(load):.1f}, {min(load):.1f}-{max(load):.1f}. Under load the wall "
        "times are mostly waiting for a core; the CPU columns (user + system time of each process) are "
        "its own work, and their ratio is the steadier one.",
    ]
    if not (plan.error or vllm.error):
        lines += [
            "",
            f"`plan` answers {vllm.median / plan.median:.1f}x sooner than vLLM's parser alone "
            f"(plan / vLLM parser = {plan.median / vllm.median:.3f}).",
        ]
    lines += [
        "",
        "Fresh processes, stdout to /dev/null, one untimed warm-up run each (it writes the checkout's",
        "bytecode, as `pip install` does), then timed runs interleaved round-robin across rows; p90 is",
        "nearest-rank. The launcher rows run this checkout (PYTHONPATH).",
        "",
        "¹ The floor: the launcher must read its settings with pydantic-settings (env > recipe file, typed,",
        "validated); importing it alone pulls in pydantic and pydantic-core, so `plan` cannot start faster",
        "than this row plus its own work.",
        "",
        "² What checking the same engine argv (processes[0].argv of `plan --format json`, minus",
        "`vllm serve`) with vLLM itself costs: a cold `import vllm`, then",
        "`make_arg_parser(...).parse_args(argv)` and `validate_parsed_serve_args`, in the vLLM engine venv.",
        "",
        "³ `plan` flushes its output and ends with os._exit, skipping the interpreter's teardown (module",
        "clean-up, tens of ms once pydantic is loaded), as `run` does; the floor (row 2) pays it. Row 6",
        "is the floor ended the same way: `plan` / row 6 is what the launcher adds by its own work.",
    ]
    return lines


def import_costs(python: str, env: dict[str, str], runs: int = 5) -> list[tuple[str, float]]:
    """Where `plan`'s import time goes beyond the floor: `-X importtime` self times of the modules
    that `import pydantic_settings` does not load, grouped by module (launcher.*, roles.*) or
    package (third-party, stdlib), fastest of `runs` runs each, largest first."""

    def self_times(argv: list[str]) -> dict[str, int]:
        err = subprocess.run(
            [python, "-X", "importtime", *argv], env=env, capture_output=True, text=True
        ).stderr
        rows = (line.split("|") for line in err.splitlines() if line.startswith("import time:"))
        return {r[2].strip(): int(r[0].split(":")[1]) for r in rows if r[0].split(":")[1].strip().isdigit()}

    floor = set(self_times(["-c", "import pydantic_settings"]))
    best: dict[str, int] = {}
    for _ in range(runs):
        for module, us in self_times(["-m", "launcher", "plan"]).items():
            if module not in floor:
                best[module] = min(us, best.get(module, us))
    groups: dict[str, float] = {}
    for module, us in best.items():
        parts = module.split(".")
        key = ".".join(
            parts[:3] if parts[0] == "launcher" else parts[:2] if parts[0] == "roles" else parts[:1]
        )
        groups[key] = groups.get(key, 0.0) + us / 1000
    return sorted(groups.items(), key=lambda kv: -kv[1])


def breakdown(costs: list[tuple[str, float]], top: int = 8) -> list[str]:
    if not costs:
        return []
    rest = sum(ms for _, ms in costs[top:])
    shown = ", ".join(f"{name} {ms:.1f}" for name, ms in costs[:top])
    return [
        "",
        f"Imports `plan` adds to the floor ({sum(ms for _, ms in costs):.0f} ms; `-X importtime` self ms,",
        f"best of 5): {shown}, the rest {rest:.1f}.",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15, help="timed runs per row (default 15)")
    ap.add_argument("--vllm-runs", type=int, default=5, help="timed runs of vLLM's parser (default 5)")
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv", help="project venv")
    ap.add_argument("--vllm-venv", type=Path, default=ROOT / ".venvs" / "vllm", help="vLLM engine venv")
    ap.add_argument("--write", type=Path, metavar="FILE", help="also write the Markdown to FILE")
    ap.add_argument(
        "--before", type=Path, metavar="CHECKOUT", help="also time `plan` of another checkout (a before row)"
    )
    opts = ap.parse_args()

    python, launcher = str(opts.venv / "bin" / "python"), str(opts.venv / "bin" / "llm-d-launcher")
    env = clean_env()
    rows = [
        Row("`python -c pass` (bare interpreter)", [python, "-c", "pass"], opts.runs, env),
        Row(
            "`python -c 'import pydantic_settings'` ¹",
            [python, "-c", "import pydantic_settings"],
            opts.runs,
            env,
        ),
        Row("`llm-d-launcher plan`", [launcher, "plan"], opts.runs, env),
        Row(
            "`llm-d-launcher plan --pool decode --group --format json`",
            [launcher, "plan", "--pool", "decode", "--group", "--format", "json"],
            opts.runs,
            env,
        ),
    ]
    vllm_python = opts.vllm_venv / "bin" / "python"
    vllm_row = Row("vLLM parser on the same engine argv (cold) ²", [], opts.vllm_runs)
    rows.append(vllm_row)
    rows.append(
        Row(
            "`python -c 'import pydantic_settings, os; os._exit(0)'` (the floor without teardown) ³",
            [python, "-c", "import pydantic_settings, os; os._exit(0)"],
            opts.runs,
            env,
        )
    )
    if opts.before:
        before_env = {**env, "PYTHONPATH": str(opts.before.resolve())}
        rows.append(
            Row(f"`llm-d-launcher plan` of {opts.before} (before)", [launcher, "plan"], opts.runs, before_env)
        )
    with tempfile.TemporaryDirectory() as tmp:
        if opts.vllm_runs == 0:
            vllm_row.error = "skipped (--vllm-runs 0)"
        elif not vllm_python.exists():
            vllm_row.error = f"skipped: no vLLM venv at {opts.vllm_venv}"
        else:
            try:
                argv = engine_argv(launcher, env)
            except (OSError, subprocess.CalledProcessError, ValueError, KeyError) as exc:
                argv, vllm_row.error = [], f"skipped: could not get the engine argv from plan ({exc})"
            vllm_row.argv = [str(vllm_python), "-c", VLLM_PARSE, json.dumps(argv)]
            vllm_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
            vllm_row.env, vllm_row.cwd = {**vllm_env, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"}, tmp
        load = measure(rows)

    body = table(rows) + summary(rows, load) + breakdown(import_costs(python, env))
    print("\n".join(body))
    if opts.write:
        version = subprocess.run([python, "-VV"], capture_output=True, text=True).stdout.strip()
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        header = (
            f"# `llm-d-launcher plan` speed — {datetime.date.today().isoformat()}, "
            f"{platform.machine()} nproc={cpus}, {version}"
        )
        opts.write.parent.mkdir(parents=True, exist_ok=True)
        opts.write.write_text("\n".join([header, "", *body]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
