"""Prints the plan of every pod of every built-in recipe and of every recipe file deploy/ ships, as the
CLI prints it (text and JSON, each pod and, with `--group`, each pool's whole LWS group; stdout,
stderr and exit code), so two checkouts can be compared byte for byte: a refactor must not move a
byte. From the repository root:

    python3 scripts/plan_snapshot.py > /tmp/before.txt   # on main
    python3 scripts/plan_snapshot.py > /tmp/after.txt    # on the branch
    diff /tmp/before.txt /tmp/after.txt
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from launcher.config.recipe_file import (  # noqa: E402
    RecipeSource,
    builtin_recipe_names,
    load_recipe,
)

LEADER = "leader-0.group.ns"  # a DNS name: the plan shows it unresolved


def _sources() -> Iterator[tuple[list[str], RecipeSource]]:
    for name in builtin_recipe_names():
        yield ["--recipe", name], RecipeSource(name, None)
    for path in sorted(ROOT.glob("deploy/**/*.yaml")):
        documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        if len(documents) == 1 and isinstance(documents[0], dict) and "pools" in documents[0]:
            relative = path.relative_to(ROOT).as_posix()
            yield ["--recipe-file", relative], RecipeSource(relative, relative)


def invocations() -> list[list[str]]:
    """Every plan command: each pod of each pool in text and JSON, and each pool's group."""
    out = []
    for recipe_args, source in _sources():
        recipe = load_recipe(source)
        for pool, spec in recipe.pools.items():
            nodes = getattr(spec, "nodes", 1)
            for fmt in ("text", "json"):
                for index in range(nodes):
                    out.append([*recipe_args, "--pool", pool, "--format", fmt, "--group-size", str(nodes),
                                "--worker-index", str(index), "--leader-address", LEADER,
                                "--pod-ip", f"10.64.0.{10 + index}"])  # fmt: skip
                out.append([*recipe_args, "--pool", pool, "--format", fmt, "--group", "--group-size",
                            str(nodes), "--worker-index", "0", "--leader-address", LEADER,
                            "--pod-ip", "10.64.0.10"])  # fmt: skip
    return out


def run(args: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMD_", "LWS_", "POD_", "TPU_"))}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    return f"$ plan {' '.join(args)}\n# rc {done.returncode}\n{done.stdout}# stderr\n{done.stderr}"


def main() -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        for block in pool.map(run, invocations()):
            sys.stdout.write(block)


if __name__ == "__main__":
    main()
