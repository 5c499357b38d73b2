"""local-group's pods.json is polled while the runner rewrites it (tests, a status script): a reader
must always find a whole JSON document, never the empty or half-written file of a rewrite."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

from launcher.localgroup.group import LocalGroup


def _runner(workdir: Path) -> SimpleNamespace:
    """What _write_manifest reads of a LocalGroup: many pods, so each rewrite takes a while."""
    pod = SimpleNamespace(index=0, name="p" * 200, address="a", ip="10.0.0.1")
    running = SimpleNamespace(
        pod=pod, proc=None, log=workdir / "log", termination_log=workdir / "t", exit_code=None,
        exited_at=None, restarts=0, last_exit_code=None, last_termination="x" * 2000,
    )  # fmt: skip
    return SimpleNamespace(
        workdir=workdir, pods=[running] * 200, probe_port=8090, tag="t",
        layout=SimpleNamespace(leader_address="leader"),
    )  # fmt: skip


def test_a_reader_never_sees_a_partial_pods_json(tmp_path: Path) -> None:
    runner = _runner(tmp_path)
    LocalGroup._write_manifest(runner)  # type: ignore[arg-type]
    done = threading.Event()

    def rewrite() -> None:
        for _ in range(300):
            LocalGroup._write_manifest(runner)  # type: ignore[arg-type]
        done.set()

    writer = threading.Thread(target=rewrite)
    writer.start()
    reads = 0
    try:
        while not done.is_set():
            assert len(json.loads((tmp_path / "pods.json").read_text())["pods"]) == 200
            reads += 1
    finally:
        writer.join()
    assert reads > 0
