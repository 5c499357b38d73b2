"""Is the checkpoint all there before the engine spends minutes importing? config.json, the tokenizer,
every shard the index names, and each shard's safetensors header (8-byte little-endian length, JSON)
with its tensors' byte ranges inside the file. Headers only: hundreds of shards check in a second."""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from launcher.contract.errors import Problem

INDEX = "model.safetensors.index.json"
MAX_HEADER = 100 << 20  # safetensors refuses headers over 100 MB too
SETTLE_SECONDS = 0.2  # shards are looked at twice at least this far apart: a growing one is being written
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tiktoken.model", "vocab.json", "spiece.model")
FIX = "copy the checkpoint again completely (or wait for the copy to finish), or fix model.path in the recipe"
_OFFLINE = ("1", "true", "yes", "on")


def check_checkpoint(path: str, argv: Sequence[str] = (), setting: str = "model.path") -> list[Problem]:
    root = Path(path)
    if not root.is_dir():
        return [Problem(setting, f"{path} does not exist or is not a directory", FIX)]
    if not (root / "config.json").is_file():
        return [Problem(setting, f"{path} holds no config.json (not a model directory)", FIX)]
    problems = []
    if not _tokenizer_elsewhere(argv) and not _has_tokenizer(root):
        problems.append(
            Problem(
                setting,
                f"{path} holds no tokenizer ({', '.join(TOKENIZER_FILES)} or *.tiktoken)",
                "copy the tokenizer files with the checkpoint, or pass --tokenizer",
            )
        )
    shards, index_problem = _shards(root)
    if index_problem:
        return [*problems, Problem(setting, index_problem, FIX)]
    return problems + [Problem(setting, m, FIX) for m in check_shards(shards)]


def _tokenizer_elsewhere(argv: Sequence[str]) -> bool:
    return any(w.split("=")[0] in ("--tokenizer", "--skip-tokenizer-init", "--tokenizer-path") for w in argv)


def _has_tokenizer(root: Path) -> bool:
    return any((root / f).is_file() for f in TOKENIZER_FILES) or any(root.glob("*.tiktoken"))


def _shards(root: Path) -> tuple[list[Path], str | None]:
    index = root / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return [], f"{index} is not a safetensors index (JSON with a weight_map)"
        missing = [n for n in names if not (root / n).is_file()]
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            return [], f"{len(missing)} of the {len(names)} shards {INDEX} names are missing: {shown}"
        return [root / n for n in names], None
    return sorted(root.glob("*.safetensors")), None


def check_shards(shards: list[Path]) -> list[str]:
    """One message per bad shard: truncated, a broken header, or still being written."""
    if not shards:
        return []
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=min(16, len(shards))) as pool:
        first = list(pool.map(_stat, shards))
        verdicts = list(pool.map(_header_problem, shards))
        time.sleep(max(0.0, SETTLE_SECONDS - (time.monotonic() - started)))
        second = list(pool.map(_stat, shards))
    out = []
    for shard, before, after, verdict in zip(shards, first, second, verdicts, strict=True):
        if before != after:
            out.append(f"{shard} is still being written (size {before[0]} -> {after[0]} bytes)")
        elif verdict:
            out.append(f"{shard} {verdict}")
    return out


def _stat(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)


def _header_problem(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(8)
            if len(head) < 8:
                return f"is truncated ({size} bytes: no safetensors header)"
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER or 8 + length > size:
                return f"is truncated or not safetensors (header of {length} bytes in a {size}-byte file)"
            header = json.loads(handle.read(length))
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    except ValueError:
        return "has a safetensors header that is not JSON"
    if not isinstance(header, dict):
        return "has a safetensors header that is not a JSON object"
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            return f"has tensor {name[:60]!r} without data_offsets"
        end = max(end, offsets[1])
    if 8 + length + end > size:
        return f"is truncated: its tensors end at byte {8 + length + end} but the file has {size}"
    return None


def hub_cache(env: Mapping[str, str]) -> Path:
    """huggingface_hub's cache: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    home = env.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return Path(home) / "hub"


def check_drafter(model: str, process_env: Mapping[str, str]) -> list[Problem]:
    """--speculative-config's model must be loadable offline when HF_HUB_OFFLINE is on (the guide
    stages it into HF_HUB_CACHE, layout models--ORG--NAME/snapshots/REV/)."""
    env = {**os.environ, **process_env}
    if model.startswith("/"):
        return check_checkpoint(model, ("--skip-tokenizer-init",), "--speculative-config model")
    if env.get("HF_HUB_OFFLINE", "").lower() not in _OFFLINE:
        return []  # the engine downloads it
    cache = hub_cache(env)
    snapshots = cache / f"models--{model.replace('/', '--')}" / "snapshots"
    staged = (
        sorted(p for p in snapshots.glob("*") if (p / "config.json").is_file()) if snapshots.is_dir() else []
    )
    if not staged:
        return [
            Problem(
                "--speculative-config model",
                f"drafter {model} is not in HF_HUB_CACHE {cache} (no {snapshots}/<revision>/config.json) "
                "and HF_HUB_OFFLINE=1 forbids downloading it",
                f"stage it: HF_HUB_CACHE={cache} hf download {model}, or unset HF_HUB_OFFLINE",
            )
        ]
    return check_checkpoint(str(staged[-1]), ("--skip-tokenizer-init",), "--speculative-config model")
