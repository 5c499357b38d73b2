"""Host checks against real inputs: generated checkpoints (sparse shards), a staged HF cache, the
container's cgroup (the engines' own interpreters: tests/engines/test_host_packages.py)."""

from __future__ import annotations

import json
import struct
import threading
import time
from pathlib import Path
from typing import Any

from launcher.supervise.host import checkpoint, packages
from launcher.supervise.host.memory import cgroup_memory_limit


def shard(path: Path, tensors: int = 4, tensor_bytes: int = 1 << 20, cut: int = 0) -> None:
    """A safetensors file: header + sparse data (truncate), `cut` bytes short of complete."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    for i in range(tensors):
        header[f"t{i}"] = {
            "dtype": "BF16",
            "shape": [tensor_bytes // 2],
            "data_offsets": [i * tensor_bytes, (i + 1) * tensor_bytes],
        }
    raw = json.dumps(header).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
        handle.truncate(8 + len(raw) + tensors * tensor_bytes - cut)


def model(root: Path, shards: int = 3, **kw: Any) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text("{}")
    (root / "tokenizer_config.json").write_text("{}")
    (root / "tiktoken.model").write_text("x")
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    (root / checkpoint.INDEX).write_text(
        json.dumps({"weight_map": {f"w{i}": n for i, n in enumerate(names)}})
    )
    for name in names:
        shard(root / name, **kw)
    return root


def test_a_complete_checkpoint_passes(tmp_path: Path) -> None:
    assert checkpoint.check_checkpoint(str(model(tmp_path / "m"))) == []


def test_a_truncated_shard_is_named(tmp_path: Path) -> None:
    root = model(tmp_path / "m")
    shard(root / "model-00002-of-00003.safetensors", cut=1)
    (problem,) = checkpoint.check_checkpoint(str(root))
    assert "model-00002-of-00003.safetensors is truncated" in problem.message


def test_a_missing_shard_and_a_missing_tokenizer_are_named(tmp_path: Path) -> None:
    root = model(tmp_path / "m")
    (root / "model-00003-of-00003.safetensors").unlink()
    (root / "tiktoken.model").unlink()
    messages = [p.message for p in checkpoint.check_checkpoint(str(root))]
    assert any("holds no tokenizer" in m for m in messages)
    assert any("1 of the 3 shards" in m and "model-00003-of-00003" in m for m in messages)
    assert checkpoint.check_checkpoint(str(root), ["--tokenizer", "/elsewhere"])[0].message.startswith("1 of")


def test_a_broken_header_is_named(tmp_path: Path) -> None:
    root = model(tmp_path / "m")
    (root / "model-00001-of-00003.safetensors").write_bytes(struct.pack("<Q", 5) + b"{oops")
    (problem,) = checkpoint.check_checkpoint(str(root))
    assert "not JSON" in problem.message


def test_a_shard_being_written_is_reported_as_such(tmp_path: Path) -> None:
    root = model(tmp_path / "m")
    growing = root / "model-00003-of-00003.safetensors"
    stop = threading.Event()

    def write() -> None:
        with open(growing, "ab") as handle:
            while not stop.is_set():
                handle.write(b"\0" * 4096)
                handle.flush()
                time.sleep(0.01)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        (problem,) = checkpoint.check_checkpoint(str(root))
    finally:
        stop.set()
        writer.join()
    assert "still being written" in problem.message


def test_hundreds_of_shards_check_in_about_a_second(tmp_path: Path) -> None:
    """~1.5 TB of sparse shards: headers only, so seconds, not a read of the data."""
    root = model(tmp_path / "big", shards=400, tensors=64, tensor_bytes=60 << 20)
    started = time.monotonic()
    assert checkpoint.check_checkpoint(str(root)) == []
    assert time.monotonic() - started < 5.0


def test_the_drafter_must_be_staged_when_offline(tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    (problem,) = checkpoint.check_drafter("Inferact/Kimi-K3.1-Pro-DSpark-preview", env)
    assert "not in HF_HUB_CACHE" in problem.message and "hf download" in problem.fix
    assert (
        checkpoint.check_drafter("Inferact/Kimi-K3.1-Pro-DSpark-preview", {**env, "HF_HUB_OFFLINE": "0"})
        == []
    )
    snapshot = cache / "models--Inferact--Kimi-K3.1-Pro-DSpark-preview" / "snapshots" / "abc123"
    model(snapshot, shards=2)
    assert checkpoint.check_drafter("Inferact/Kimi-K3.1-Pro-DSpark-preview", env) == []


def test_this_containers_memory_limit_is_read() -> None:
    limit, where = cgroup_memory_limit()
    assert limit is None or (limit > 0 and where.startswith("/sys/fs/cgroup"))


def test_startupz_says_which_catalogue_checked_the_flags() -> None:
    from healthchecks.state import PodHealth
    from launcher.contract.plan import Check, Probes

    health = PodHealth(Probes(8090, ready=(Check("engine", "engine"),), started=Check("engine", "engine")))
    assert "flag_catalog" not in health.startup()[1]
    facts = packages.EngineFacts("/venv/bin/python", "vllm", "0.33.1", "0.32.0")
    assert not facts.matches and packages.EngineFacts("p", "vllm", "0.32.0+cpu", "0.32.0").matches
    health.flag_catalog = facts.as_dict()
    body = health.startup()[1]
    assert body["flag_catalog"]["installed_version"] == "0.33.1" and body["flag_catalog"]["matches"] is False
