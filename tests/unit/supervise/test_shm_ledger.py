"""launcher/supervise/shm_ledger.py: the clean-up removes only the files our process tree held, as
the ledger proves them (name and inode); everything else matching an engine's names is left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher.supervise.preflight import STALE_SHM, clean_shm, stale_shm
from launcher.supervise.shm_ledger import (
    LEDGER_MAX_BYTES,
    LEDGER_NAME,
    Ledger,
    ledger_owner,
    read_ledger,
    record_held,
    write_ledger,
)
from roles.engines import FAMILIES


def _holder(path: Path, *, mapped_only: bool = False) -> subprocess.Popen[str]:
    """A real child process (as an engine's worker) that creates the file and holds it open; or,
    mapped_only, maps it and closes its descriptor, as NCCL's shmutils does (visible in maps alone;
    CPython's mmap would keep a duplicate descriptor, so libc's mmap is called)."""
    hold = f"f = open({str(path)!r}, 'wb')"
    if mapped_only:
        hold = (
            "import ctypes; libc = ctypes.CDLL(None); libc.mmap.restype = ctypes.c_void_p; "
            "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t] + [ctypes.c_int] * 3 + [ctypes.c_long]; "
            f"fd = os.open({str(path)!r}, os.O_CREAT | os.O_RDWR, 0o600); os.ftruncate(fd, 4096); "
            "assert libc.mmap(None, 4096, 3, 1, fd, 0) not in (None, 2**64 - 1); os.close(fd)"  # RW, SHARED
        )
    code = f"import os, sys; {hold}; print('ok', flush=True); sys.stdin.read()"
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline() == "ok\n"
    return child


def _crash(child: subprocess.Popen[str]) -> None:
    child.kill()
    child.wait()


def test_a_file_our_tree_held_is_removed_at_the_next_start_once_orphaned(shm: Path) -> None:
    """llm-d/llm-d#352: the engine crashes leaving the segments it held; the next start removes them."""
    (shm / "psm_0000aaaa").write_bytes(b"x")  # matches, but no process of ours ever held it
    child = _holder(shm / "psm_0000bbbb")
    try:
        record_held(str(shm), STALE_SHM, [child.pid])
        assert read_ledger(shm).files(None) == {"psm_0000bbbb": (shm / "psm_0000bbbb").stat().st_ino}
        assert clean_shm(str(shm)).removed == []  # still held: kept, and still ours
    finally:
        _crash(child)
    done = clean_shm(str(shm))
    assert (done.removed, done.failed, done.unproven, done.ledger_problem) == (["psm_0000bbbb"], [], 1, None)
    assert sorted(p.name for p in shm.iterdir()) == [LEDGER_NAME, "psm_0000aaaa"]
    assert read_ledger(shm).files(None) == {}  # reset to what is left of ours: nothing


def test_a_segment_our_tree_only_maps_is_recorded_and_kept_while_mapped(shm: Path) -> None:
    segment = shm / "nccl-AbC123"
    child = _holder(segment, mapped_only=True)
    try:
        assert not [
            fd
            for fd in os.listdir(f"/proc/{child.pid}/fd")
            if os.readlink(f"/proc/{child.pid}/fd/{fd}") == str(segment)
        ]
        record_held(str(shm), STALE_SHM, [child.pid])
        assert set(read_ledger(shm).files(None)) == {segment.name}
        assert clean_shm(str(shm)).removed == [] and segment.exists()  # still mapped: kept
    finally:
        _crash(child)
    assert clean_shm(str(shm)).removed == [segment.name]


def test_a_file_no_process_of_ours_held_is_left(shm: Path) -> None:
    """Another program's SharedMemory, created and closed, to be attached later: nobody holds it."""
    theirs = shm / "psm_0000cccc"
    theirs.write_bytes(b"x")
    child = _holder(shm / "psm_0000dddd")
    try:
        record_held(str(shm), STALE_SHM, [os.getppid()])  # not the holder: a process outside our tree
        assert not (shm / LEDGER_NAME).exists()
        record_held(str(shm), STALE_SHM, [child.pid])
    finally:
        _crash(child)
    assert set(read_ledger(shm).files(None)) == {"psm_0000dddd"}
    done = clean_shm(str(shm))
    assert done.removed == ["psm_0000dddd"] and done.unproven == 1 and theirs.exists()
    assert clean_shm(str(shm)).unproven == 1 and theirs.exists()  # and at every later start


def test_no_ledger_removes_nothing(shm: Path) -> None:
    for name in ("psm_0000eeee", "sem.mp-abc123", "torch_1_2_3", "nccl-AbC123"):
        (shm / name).write_bytes(b"x")
    done = clean_shm(str(shm))
    assert (done.removed, done.unproven, done.ledger_problem) == ([], 4, None)
    assert not (shm / LEDGER_NAME).exists()  # none is made up either


def test_the_same_name_made_again_by_someone_else_is_left(shm: Path) -> None:
    path = shm / "psm_0000ffff"
    child = _holder(path)
    try:
        record_held(str(shm), STALE_SHM, [child.pid])
    finally:
        _crash(child)
    recorded = read_ledger(shm).files(None)["psm_0000ffff"]
    path.unlink()
    (shm / "psm_00001111").write_bytes(b"x")  # so the new file cannot take the freed inode back
    path.write_bytes(b"someone else's")
    assert path.stat().st_ino != recorded
    done = clean_shm(str(shm))
    assert done.removed == [] and path.read_bytes() == b"someone else's" and done.unproven == 2
    assert read_ledger(shm).files(None) == {}  # the recorded file is gone: nothing of ours is left


def test_another_pods_entries_prove_nothing_and_are_kept(shm: Path) -> None:
    """A pod sharing the directory (hostIPC) records its own segments; its processes are invisible
    here, so its entries are never ours to act on, and the reset keeps them."""
    child = _holder(shm / "psm_00005555")
    try:
        record_held(str(shm), STALE_SHM, [child.pid], "pod-b")
    finally:
        _crash(child)
    done = clean_shm(str(shm), pod_name="pod-a")
    assert done.removed == [] and done.unproven == 1 and (shm / "psm_00005555").exists()
    assert set(read_ledger(shm).files("pod-b")) == {"psm_00005555"}
    assert clean_shm(str(shm), pod_name="pod-b").removed == ["psm_00005555"]  # pod-b's next start


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b'{"owners": {"OWNER": {"psm_00002222": "1"}}}',
        b'{"owners": {"OWNER": []}}',
        b"[]",
        b'{"owners": {"OWNER": {"psm_00002222": INODE}}}' + b" " * LEDGER_MAX_BYTES,
    ],
    ids=["garbage", "inode-not-int", "files-not-a-map", "not-a-map", "huge"],
)
def test_a_corrupt_ledger_is_empty_with_one_problem(shm: Path, content: bytes) -> None:
    (shm / "psm_00002222").write_bytes(b"x")
    inode = str((shm / "psm_00002222").stat().st_ino).encode()
    content = content.replace(b"OWNER", ledger_owner(None).encode()).replace(b"INODE", inode)
    (shm / LEDGER_NAME).write_bytes(content)  # huge: it would prove the file
    done = clean_shm(str(shm))
    assert done.removed == [] and done.unproven == 1 and done.ledger_problem
    assert read_ledger(shm) == Ledger({})  # reset: the next start warns no more


def test_a_ledger_that_is_a_link_or_a_fifo_is_not_followed(shm: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    (shm / "psm_00003333").write_bytes(b"x")
    inode = (shm / "psm_00003333").stat().st_ino
    recorded = json.dumps({"owners": {ledger_owner(None): {"psm_00003333": inode}}})
    target.write_text(recorded)
    (shm / LEDGER_NAME).symlink_to(target)
    assert read_ledger(shm).problem and clean_shm(str(shm)).removed == []
    assert target.read_text() == recorded  # the reset replaced the link, not what it points at
    (shm / LEDGER_NAME).unlink(missing_ok=True)
    os.mkfifo(shm / LEDGER_NAME)  # no writer: a blocking open would hang the preflight
    assert read_ledger(shm).problem == "is not a regular file"


def test_the_ledger_is_rewritten_only_when_it_gains_a_file(shm: Path) -> None:
    child = _holder(shm / "psm_00004444")
    try:
        record_held(str(shm), STALE_SHM, [child.pid])
        first = (shm / LEDGER_NAME).stat().st_ino  # each write renames a new file over it
        record_held(str(shm), STALE_SHM, [child.pid])
        assert (shm / LEDGER_NAME).stat().st_ino == first
        write_ledger(shm, {ledger_owner(None): {"psm_0000dead": 7}})  # rewritten by another launcher
        record_held(str(shm), STALE_SHM, [child.pid])
        assert set(read_ledger(shm).files(None)) == {"psm_0000dead", "psm_00004444"}
    finally:
        _crash(child)
    assert [p.name for p in shm.iterdir() if p.name.startswith(LEDGER_NAME + ".")] == []  # no temporaries


def test_the_ledgers_own_name_matches_no_engines_segments() -> None:
    for family in FAMILIES:
        pattern = stale_shm(family.shm_segments)
        assert pattern.fullmatch(LEDGER_NAME) is None, family.name
        assert pattern.fullmatch(LEDGER_NAME + ".tmp1a2b3c") is None, family.name


NOBODY = 65534  # another user: a real uid, as a neighbour sharing the node's /dev/shm (hostIPC) is


def _as_nobody(make: Callable[[], None]) -> None:
    """Run make in a forked child that has dropped to uid/gid NOBODY (the tests run as root here; a
    fork, not a new interpreter: NOBODY cannot read the venv's Python under /root)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            make()
            code = 0
        finally:
            os._exit(code)
    assert os.waitpid(pid, 0)[1] == 0


def _plant(path: Path, data: bytes = b"x", mode: int = 0o644) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, mode)
    os.write(fd, data)
    os.close(fd)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="becoming another uid needs root")


@needs_root
def test_a_ledger_another_user_planted_is_ignored_with_one_problem(shm: Path) -> None:
    """Issue #34: another uid creates the ledger first, naming its own segment (not held: a producer
    that closed it for a consumer to attach) with its inode; the launcher, as root, must not delete it."""
    shm.chmod(0o1777)  # as /dev/shm: anyone may create, only the owner may remove
    segment = shm / "psm_0000beef"
    planted = {ledger_owner(None): {segment.name: 0}}

    def plant() -> None:
        _plant(segment)
        planted[ledger_owner(None)][segment.name] = segment.stat().st_ino
        _plant(shm / LEDGER_NAME, json.dumps({"owners": planted}).encode())

    _as_nobody(plant)
    assert (shm / LEDGER_NAME).stat().st_uid == NOBODY
    ledger = read_ledger(shm)
    assert ledger.owners == {} and ledger.problem == f"is owned by uid {NOBODY}, not by the launcher's uid 0"
    done = clean_shm(str(shm))
    assert (done.removed, done.unproven, done.ledger_problem) == ([], 1, ledger.problem)
    assert segment.exists()


def test_a_ledger_others_may_write_is_ignored(shm: Path) -> None:
    segment = shm / "psm_0000cafe"
    segment.write_bytes(b"x")
    write_ledger(shm, {ledger_owner(None): {segment.name: segment.stat().st_ino}})
    (shm / LEDGER_NAME).chmod(0o666)
    done = clean_shm(str(shm))
    assert done.removed == [] and done.ledger_problem == "is writable by its group or by others (mode 666)"
    assert segment.exists()


@needs_root
def test_a_listed_file_another_user_owns_is_never_removed(shm: Path) -> None:
    """Our own ledger, but the file under that name and inode now belongs to another uid (chown after
    we listed it, or a ledger written from a guess): only the launcher's uid's files are removed."""
    shm.chmod(0o1777)
    segment = shm / "psm_0000f00d"
    _as_nobody(lambda: _plant(segment))
    write_ledger(shm, {ledger_owner(None): {segment.name: segment.stat().st_ino}})
    done = clean_shm(str(shm))
    assert (done.removed, done.unproven, done.ledger_problem) == ([], 1, None)
    assert segment.exists()
