"""LLMD_SHM_DIR clean-up: only the engines' own stale segments, only on a tmpfs, never a model."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.contract.plan import Plan, PodIdentity, Role, RoleKind, ShutdownBudget
from launcher.supervise import preflight
from launcher.supervise.preflight import check_shm_dir, clean_shm
from roles.engines.sglang import SGLANG
from roles.engines.vllm import VLLM
from tests.unit.supervise.probes import ENGINE_RUNS

STALE = ("psm_1a2b3c4d", "sem.mp-x1y2z3", "torch_12_345_0", "nccl-AbC123", "vllm_offload_e0.mmap")


@pytest.fixture
def shm() -> Iterator[Path]:
    """A directory of our own on the machine's /dev/shm (a tmpfs); only it is ever removed."""
    root = Path("/dev/shm") / f"llmd-test-{uuid.uuid4().hex}"
    root.mkdir()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _plan(model: str | None) -> Plan:
    role = Role("p", RoleKind.LEADER)
    return Plan("r", role, PodIdentity(), (), ShutdownBudget.from_grace(30), ENGINE_RUNS, model_path=model)


def test_a_model_directory_is_never_emptied(shm: Path) -> None:
    files = ("config.json", "model-00001-of-00002.safetensors", "tokenizer.json", "psm_notes.txt")
    for name in files:
        (shm / name).write_bytes(b"weights")
    removed, failed = clean_shm(str(shm))
    assert (removed, failed) == ([], [])
    assert sorted(p.name for p in shm.iterdir()) == sorted(files)
    assert check_shm_dir(_plan(str(shm)), str(shm))[0].setting == "LLMD_SHM_DIR"
    assert check_shm_dir(_plan(str(shm / "sub" / "model")), str(shm))  # a model below it
    assert check_shm_dir(_plan(str(shm)), str(shm / "x")) == []  # absent: nothing to clean


def test_only_stale_engine_segments_are_removed(shm: Path, tmp_path: Path) -> None:
    for name in STALE:
        (shm / name).write_bytes(b"x")
    held = shm / "psm_feedbeef"
    held.write_bytes(b"x")
    outside = tmp_path / "precious"
    outside.write_bytes(b"keep")
    (shm / "psm_0badc0de").symlink_to(outside)  # a link is never followed nor removed
    (shm / "torch_1_2_3").mkdir()  # nor a directory
    (shm / "torch_1_2_3" / "psm_00112233").write_bytes(b"x")
    with held.open("rb"):
        removed, failed = clean_shm(str(shm), VLLM.shm_segments)  # the plan's engine's own segments
    assert sorted(removed) == sorted(STALE) and failed == []
    assert held.exists() and outside.read_bytes() == b"keep" and (shm / "psm_0badc0de").is_symlink()
    assert (shm / "torch_1_2_3" / "psm_00112233").exists()
    assert check_shm_dir(_plan("/models/x"), str(shm)) == []


def test_a_directory_that_is_not_tmpfs_is_refused(tmp_path: Path) -> None:
    (tmp_path / "psm_1a2b3c4d").write_bytes(b"x")
    problems = check_shm_dir(_plan(None), str(tmp_path))
    assert [p.setting for p in problems] == ["LLMD_SHM_DIR"] and "not a tmpfs" in problems[0].message
    assert (tmp_path / "psm_1a2b3c4d").exists()


def test_an_undeletable_file_is_reported_not_raised(shm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (shm / "psm_aaaaaaaa").write_bytes(b"x")
    (shm / "psm_bbbbbbbb").write_bytes(b"x")
    real_unlink = Path.unlink

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if self.name == "psm_aaaaaaaa":
            raise PermissionError(1, os.strerror(1))
        real_unlink(self, missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    removed, failed = clean_shm(str(shm))
    assert removed == ["psm_bbbbbbbb"] and failed == ["psm_aaaaaaaa (Operation not permitted)"]
    assert preflight.STALE_SHM.fullmatch("config.json") is None


def test_an_engines_segments_are_removed_only_for_that_engine(shm: Path) -> None:
    """The engine's own segment names come with its plan: another engine's files are not its to clean."""
    for name in ("vllm_offload_e0.mmap", "sglang_loads_0.shm"):
        (shm / name).write_bytes(b"x")
    assert clean_shm(str(shm)) == ([], [])
    assert clean_shm(str(shm), SGLANG.shm_segments) == (["sglang_loads_0.shm"], [])
    assert clean_shm(str(shm), VLLM.shm_segments) == (["vllm_offload_e0.mmap"], [])
