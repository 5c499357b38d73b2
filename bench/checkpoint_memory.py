"""How much memory does the checkpoint preflight take when a checkpoint's shards declare huge
safetensors headers (issue #24 item 6)? Results: bench/results/checkpoint_memory.md.

16 shards (hard links to one file: the check opens and reads each one) whose headers declare
~99 MB (just under safetensors' 100 MB limit), four kinds:
- zeros: a sparse file, nothing but the length written (a header that is no JSON at all);
- spaces: `{` and then spaces, never closed (read in full before the parser can fail);
- tiny entries: `{` and 11 million distinct `"k":{}` entries (what a parser turns into most objects);
- at the limit: minimal tensor entries, MAX_OBJECTS JSON objects in all (the most the check decodes
  of one header), the last entry's tensor past the end of the file.

Each check runs in a fresh interpreter; its growth is peak RSS (VmHWM, reset through
/proc/self/clear_refs) minus RSS before the check. `--before DIR` measures another copy of the
launcher too (e.g. `git archive <commit> launcher | tar -x -C DIR`), side by side.

Goal: growth <= 256 MiB whatever the shards declare (a launcher container's budget, far below any
engine container's limit), i.e. one header's bytes plus its bounded decoding, never 16 at once.

    .venv/bin/python bench/checkpoint_memory.py [--before DIR] [--write bench/results/checkpoint_memory.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from launcher.supervise.host.checkpoint import MAX_OBJECTS  # noqa: E402

SHARDS = 16
HEADER = 99 << 20
GOAL = 256 << 20

MEASURE = """\
import json, sys, time
from launcher.supervise.host import checkpoint
def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith(key))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before, began = status("VmRSS:"), time.monotonic()
problems = checkpoint.check_checkpoint(sys.argv[1])
took = time.monotonic() - began
message = problems[0].message[-90:] if problems else "(none)"
print(json.dumps({"grown": status("VmHWM:") - before, "seconds": took, "problem": message}))
"""


def _body(kind: str) -> bytes:
    if kind == "spaces":
        return b"{" + b" " * (HEADER - 1)
    if kind == "tiny entries":
        return (b"{" + b"".join(b'"%x":{},' % i for i in range(HEADER // 8)))[:HEADER]
    # MAX_OBJECTS objects with the top level: the last entry's tensor lies past the end of the file.
    last = MAX_OBJECTS - 2
    entry = b'"t%d":{"dtype":"F32","shape":[0],"data_offsets":[0,%d]}'
    entries = [entry % (i, 0) for i in range(last)] + [entry % (last, 1 << 40)]
    return b"{" + b",".join(entries) + b"}"


def build(root: Path, kind: str) -> Path:
    """A model directory whose SHARDS shard names are hard links to one file of this kind."""
    root.mkdir(parents=True)
    (root / "config.json").write_text("{}")
    (root / "tokenizer.json").write_text("{}")
    names = [f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors" for i in range(SHARDS)]
    index = {"weight_map": {f"w{i}": n for i, n in enumerate(names)}}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    first = root / names[0]
    with open(first, "wb") as handle:
        if kind == "zeros":
            handle.write(struct.pack("<Q", HEADER))
        else:
            body = _body(kind)
            handle.write(struct.pack("<Q", len(body)) + body)
        handle.truncate(8 + (HEADER if kind == "zeros" else len(body)) + 64)
    for name in names[1:]:
        (root / name).hardlink_to(first)
    return root


def measure(code: Path, model: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(model)],
        capture_output=True,
        text=True,
        env=env,
        cwd=model.parent,  # `-c` puts the working directory first on sys.path
        check=True,
    ).stdout
    result: dict[str, object] = json.loads(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="another copy of the launcher (holds launcher/)")
    parser.add_argument("--write", type=Path, help="also write the table to this file")
    args = parser.parse_args()
    runs = [("before", args.before)] if args.before else []
    runs.append(("this checkout", REPO))
    rows = []
    with tempfile.TemporaryDirectory(prefix="llmd-ckpt-bench-") as tmp:
        for kind in ("zeros", "spaces", "tiny entries", "at the limit"):
            model = build(Path(tmp) / kind.replace(" ", "-"), kind)
            for label, code in runs:
                result = measure(code, model)
                grown, seconds = int(str(result["grown"])), float(str(result["seconds"]))
                verdict = "met" if grown <= GOAL else "NOT MET"
                rows.append(
                    f"| {kind} | {label} | {grown / (1 << 20):.0f} MiB | {seconds:.1f} s "
                    f"| {verdict} | …{result['problem']} |"
                )
                print(rows[-1], flush=True)
            for path in model.iterdir():
                path.unlink()
    head = (
        f"# Checkpoint preflight memory under hostile headers — {datetime.date.today()}, "
        f"{platform.machine()} nproc={os.cpu_count()}, Python {platform.python_version()}\n\n"
        f"{SHARDS} shards, each declaring a {HEADER >> 20} MiB safetensors header; growth = peak RSS of "
        "the check minus RSS before it, in a fresh interpreter.\n\n"
        f"**Goal: growth ≤ {GOAL >> 20} MiB whatever the shards declare.**\n\n"
        "| header | code | peak RSS growth | check took | goal | first problem (its end) |\n"
        "|---|---|---:|---:|---|---|\n"
    )
    text = head + "\n".join(rows) + "\n"
    if args.write:
        args.write.write_text(text)
    print(f"\n{text}")


if __name__ == "__main__":
    main()
