"""Is the checkpoint all there before the engine spends minutes importing? config.json, the tokenizer,
every shard the index names, and each shard's safetensors header (8-byte little-endian length, JSON)
with its tensors' byte ranges inside the file. Headers only: hundreds of shards check in a second.

A downloaded checkpoint is untrusted input: the index may name only files inside the model directory,
no message shows a byte of a file's data, and one header at a time is read and decoded (at most
MAX_HEADER bytes and MAX_OBJECTS objects), whatever sizes the shards declare."""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

import msgspec

from launcher.contract.errors import Problem

INDEX = "model.safetensors.index.json"
MAX_HEADER = 100 << 20  # safetensors refuses headers over 100 MB too; an index lists no more
# JSON objects a header may hold (tensor entries, metadata): several times the tensors of a whole
# 1T-parameter MoE model (~100-200k), in one file. Each is decoded (a name and offsets, ~200 bytes),
# so this bounds a header's decoded size (bench/results/checkpoint_memory.md).
MAX_OBJECTS = 500_000
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


class _Index(msgspec.Struct):
    weight_map: dict[str, str]  # tensor -> shard file name


class _Entry(msgspec.Struct, gc=False):
    """What the check reads of one header entry (`__metadata__` decodes to one without offsets);
    other fields are skipped undecoded."""

    data_offsets: tuple[int, int] | None = None


def _shards(root: Path) -> tuple[list[Path], str | None]:
    index = root / INDEX
    if index.is_file():
        try:
            if index.stat().st_size > MAX_HEADER:
                return [], f"{index} is larger than {MAX_HEADER >> 20} MB (not a safetensors index)"
            names = sorted(set(msgspec.json.decode(index.read_bytes(), type=_Index).weight_map.values()))
        except (OSError, msgspec.MsgspecError, RecursionError):
            return [], f"{index} is not a safetensors index (JSON with a weight_map of file names)"
        outside = [n for n in names if _outside(n)]
        if outside:
            return [], f"{INDEX} names shards outside the model directory: {_listed(outside)}"
        missing = [n for n in names if not (root / n).is_file()]
        if missing:
            return (
                [],
                f"{len(missing)} of the {len(names)} shards {INDEX} names are missing: {_listed(missing)}",
            )
        return [root / n for n in names], None
    return sorted(root.glob("*.safetensors")), None


def _outside(name: str) -> bool:
    """Not a relative path below the model directory (absolute, empty, or through `..`)."""
    return not name or name.startswith("/") or ".." in PurePosixPath(name).parts


def _listed(names: list[str]) -> str:
    shown = ", ".join(repr(n[:80])[1:-1] for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def check_shards(shards: list[Path]) -> list[str]:
    """One message per bad shard: truncated, a broken header, or still being written."""
    if not shards:
        return []
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=min(16, len(shards))) as pool:
        first = list(pool.map(_stat, shards))
        lengths = list(pool.map(_header_length, shards))  # the I/O, in parallel; brings small headers in
        # Read and decoded here, one at a time: what a pool thread frees stays in its malloc arena.
        verdicts = [
            n if isinstance(n, str) else _header_problem(s, n) for s, n in zip(shards, lengths, strict=True)
        ]
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


def _header_length(path: Path) -> int | str:
    """The header length the shard declares, or why it cannot be safetensors (huggingface/safetensors
    README "Format": an 8-byte little-endian length, then that many bytes of JSON beginning with `{`)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(9)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if len(head) < 8:
        return f"is truncated ({size} bytes: no safetensors header)"
    (length,) = struct.unpack("<Q", head[:8])
    if length > MAX_HEADER or 8 + length > size:
        # (the declared length is not shown: those 8 bytes may be any file's, e.g. a token's)
        return f"is truncated or not safetensors (the header length it declares exceeds its {size} bytes)"
    if head[8:] != b"{":
        return "is not safetensors (its header does not begin with `{`)"
    return int(length)


def _header_problem(path: Path, length: int) -> str | None:
    """Why the header is not JSON describing tensors that lie inside the file, or None."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(8)
            data = handle.read(length)
        if data.count(b"{") > MAX_OBJECTS:
            return f"has a safetensors header of more than {MAX_OBJECTS:,} objects (tensors in one file)"
        header = msgspec.json.decode(data, type=dict[str, _Entry])
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    except msgspec.DecodeError:
        return "has a safetensors header that is not JSON"
    except msgspec.ValidationError as exc:  # names types and places, never the data
        return f"has a safetensors header that is not a JSON object of tensors ({exc})"
    except RecursionError:
        return "has a safetensors header nested too deep to be one"
    end, bare = 0, 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry.data_offsets is None:
            bare += 1
        else:
            end = max(end, entry.data_offsets[1])
    if bare:
        return f"has {bare} tensor(s) without data_offsets"
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
