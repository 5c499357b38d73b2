"""LLMD_SHM_DIR clean-up: only the engines' own stale segments, only on a tmpfs, never a model. The
files these tests expect removed are first recorded in the ledger as held by our tree (_ours);
tests/unit/supervise/test_shm_ledger.py proves the ledger itself."""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.contract.plan import Plan, PodIdentity, Role, RoleKind, ShutdownBudget
from launcher.supervise import preflight
from launcher.supervise.preflight import check_shm_dir, clean_shm
from launcher.supervise.shm_ledger import ledger_owner, write_ledger
from roles.engines.sglang import SGLANG
from roles.engines.vllm import VLLM
from tests.unit.supervise.probes import ENGINE_RUNS

STALE = ("psm_1a2b3c4d", "sem.mp-x1y2z3", "torch_12_345_0", "nccl-AbC123", "vllm_offload_e0.mmap")


def _ours(shm: Path, *names: str) -> None:
    """Record these files in the ledger as a previous run's samples would have (name + inode)."""
    write_ledger(shm, {ledger_owner(None): {name: (shm / name).lstat().st_ino for name in names}})


def _plan(model: str | None) -> Plan:
    role = Role("p", RoleKind.LEADER)
    return Plan("r", role, PodIdentity(), (), ShutdownBudget.from_grace(30), ENGINE_RUNS, model_path=model)


def test_a_model_directory_is_never_emptied(shm: Path) -> None:
    files = ("config.json", "model-00001-of-00002.safetensors", "tokenizer.json", "psm_notes.txt")
    for name in files:
        (shm / name).write_bytes(b"weights")
    _ours(shm, *files)  # even recorded as ours, no name of a model matches an engine's segments
    done = clean_shm(str(shm))
    assert (done.removed, done.failed) == ([], [])
    assert sorted(p.name for p in shm.iterdir() if not p.name.startswith(".")) == sorted(files)
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
    _ours(shm, *STALE, "psm_feedbeef", "psm_0badc0de", "torch_1_2_3")
    with held.open("rb"):
        done = clean_shm(str(shm), VLLM.shm_segments)  # the plan's engine's own segments
    assert sorted(done.removed) == sorted(STALE) and done.failed == []
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
    _ours(shm, "psm_aaaaaaaa", "psm_bbbbbbbb")
    real_unlink = Path.unlink

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if self.name == "psm_aaaaaaaa":
            raise PermissionError(1, os.strerror(1))
        real_unlink(self, missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    done = clean_shm(str(shm))
    assert done.removed == ["psm_bbbbbbbb"] and done.failed == ["psm_aaaaaaaa (Operation not permitted)"]
    assert preflight.STALE_SHM.fullmatch("config.json") is None


def test_an_engines_segments_are_removed_only_for_that_engine(shm: Path) -> None:
    """The engine's own segment names come with its plan: another engine's files are not its to clean."""
    for name in ("vllm_offload_e0.mmap", "sglang_loads_0.shm"):
        (shm / name).write_bytes(b"x")
    _ours(shm, "vllm_offload_e0.mmap", "sglang_loads_0.shm")
    assert clean_shm(str(shm)).removed == []
    assert clean_shm(str(shm), SGLANG.shm_segments).removed == ["sglang_loads_0.shm"]
    assert clean_shm(str(shm), VLLM.shm_segments).removed == ["vllm_offload_e0.mmap"]


def _spellings(shm: Path, tmp_path: Path) -> list[str]:
    """The same directory as a symlink (Debian's /run/shm is one), through `..`, and with `//`."""
    link = tmp_path / "run-shm"
    link.symlink_to(shm)
    return [str(link), f"{shm.parent}/../{shm.parent.name}/{shm.name}", f"/{shm.parent}//{shm.name}/"]


def test_a_segment_in_use_is_kept_however_the_directory_is_spelled(shm: Path, tmp_path: Path) -> None:
    held, mapped, stale = shm / "psm_00c0ffee", shm / "psm_0000beef", shm / "psm_0000dead"
    for spelling in _spellings(shm, tmp_path):
        for path in (held, mapped, stale):
            path.write_bytes(b"x" * 4096)
        _ours(shm, held.name, mapped.name, stale.name)
        with mapped.open("r+b") as handle:
            region = mmap.mmap(handle.fileno(), 4096)  # mapped only: /proc/PID/maps, not fd/
        try:
            with held.open("rb"):
                done = clean_shm(spelling)
        finally:
            region.close()
        assert (done.removed, done.failed) == (["psm_0000dead"], []), spelling
        assert held.exists() and mapped.exists(), spelling


def test_a_bind_mount_of_the_models_tmpfs_is_refused(shm: Path, tmp_path: Path) -> None:
    """The model's tmpfs parent bind-mounted as LLMD_SHM_DIR: no path of one lies under the other,
    the directory is the same. Run in a private user + mount namespace (unshare -rm)."""
    (shm / "m").mkdir()
    (shm / "m" / "config.json").write_text("{}")
    target = tmp_path / "bound"
    target.mkdir()
    code = (
        "import subprocess, sys\n"
        f"subprocess.run(['mount', '--bind', {str(shm)!r}, {str(target)!r}], check=True)\n"
        "from launcher.supervise.preflight import check_shm_dir\n"
        "from tests.unit.supervise.test_shm_cleanup import _plan\n"
        f"print([p.message for p in check_shm_dir(_plan({str(shm / 'm')!r}), {str(target)!r})])\n"
        f"print([p.message for p in check_shm_dir(_plan({str(target / 'm')!r}), {str(shm)!r})])\n"
    )
    done = subprocess.run(
        ["unshare", "-rm", "--propagation", "private", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
        check=False,
    )
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"no user namespaces here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all("holds or lies inside the model path" in line for line in lines), lines
