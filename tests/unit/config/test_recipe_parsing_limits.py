"""Hostile recipe files: bounded parse time, one line per problem, exit 2, never a traceback."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import Run

HEAD = "name: x\nmodel: {path: m}\ndefault_pool: p\n"


def _plan(run_cli: Run, tmp_path: Path, text: str) -> tuple[int, str]:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    began = time.monotonic()
    code, _, err = run_cli("plan", "--recipe-file", str(path))
    assert time.monotonic() - began < 5
    assert "Traceback" not in err
    assert all(line.startswith("llm-d-launcher: error: ") for line in err.splitlines()), err
    return code, err


def _bomb(levels: int) -> str:
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines)


def test_alias_bomb_is_refused_quickly(run_cli: Run, tmp_path: Path) -> None:
    bomb = "launcher:\n  " + _bomb(9).replace("\n", "\n  ")
    args = "pools: {p: {kind: vllm, args: {served-model-name: *l8}}}\n"
    code, err = _plan(run_cli, tmp_path, HEAD + "x-bomb:\n  " + _bomb(9).replace("\n", "\n  ") + "\n" + args)
    assert code == 2 and "alias" in err
    code, err = _plan(run_cli, tmp_path, HEAD + bomb + "\npools: {p: {kind: vllm}}\n")
    assert code == 2


def test_a_big_file_is_refused(run_cli: Run, tmp_path: Path) -> None:
    code, err = _plan(run_cli, tmp_path, HEAD + "description: " + "x" * (2 << 20) + "\n")
    assert code == 2 and "large" in err


@pytest.mark.parametrize("path", ["/dev/zero", "fifo"])
def test_a_recipe_path_that_never_ends_is_refused(tmp_path: Path, path: str) -> None:
    """A device that never ends (read whole, then refused as too large: a MemoryError first) and a
    FIFO no one writes to (open(2) waits for a writer for ever). In a child of its own: the first
    would take the machine's memory, the second the test's time, were the bound gone."""
    if path == "fifo":
        path = str(tmp_path / "recipe.yaml")
        os.mkfifo(path)

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    done = subprocess.run(
        [sys.executable, "-m", "launcher.cli", "plan", "--recipe-file", path],
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=limit_memory,
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr[-2000:]
    assert (
        done.stderr.startswith("llm-d-launcher: error: LLMD_RECIPE_FILE: ")
        and len(done.stderr.splitlines()) == 1
    ), done.stderr[-2000:]


def test_a_pipe_with_a_writer_is_read_to_its_end(run_cli: Run) -> None:
    """`--recipe-file <(...)`: the recipe arrives after the launcher opened the pipe, and is used."""
    read, write = os.pipe()
    text = (HEAD + "pools: {p: {kind: vllm}}\n").encode()

    def write_late() -> None:
        os.write(write, text)
        os.close(write)

    writer = threading.Timer(0.3, write_late)
    writer.start()
    try:
        code, out, err = run_cli("plan", "--recipe-file", f"/dev/fd/{read}")
    finally:
        writer.join()
        os.close(read)
    assert code == 0 and "vllm serve" in out, err


@pytest.mark.parametrize("where", ["top", "args"])
def test_deep_nesting_is_refused(run_cli: Run, tmp_path: Path, where: str) -> None:
    deep = "[" * 400 + "]" * 400
    body = f"x: {deep}\n" if where == "top" else f"pools: {{p: {{kind: vllm, args: {{x: {deep}}}}}}}\n"
    code, err = _plan(run_cli, tmp_path, HEAD + body)
    assert code == 2 and "too deeply" in err


@pytest.mark.parametrize("key", ["? [a]\n    : 1", "? {a: 1}\n    : 1", "1: 2\n    a: 3", "null: 1"])
def test_keys_that_are_not_text_are_refused(run_cli: Run, tmp_path: Path, key: str) -> None:
    code, err = _plan(run_cli, tmp_path, HEAD + f"launcher:\n    {key}\npools: {{p: {{kind: vllm}}}}\n")
    assert code == 2 and "key" in err


@pytest.mark.parametrize(
    "body",
    [
        'env: {A: "x\\0y"}\n',
        'model: {path: "m\\0"}\n',
        'pools: {p: {kind: vllm, args: {served-model-name: "a\\0b"}}}\n',
        'pools: {p: {kind: vllm, args: {middleware: ["a", "b\\0"]}}}\n',
    ],
)
def test_nul_bytes_in_a_recipe_are_refused(run_cli: Run, tmp_path: Path, body: str) -> None:
    text = "name: x\ndefault_pool: p\n" + body
    text += "model: {path: m}\n" if "model:" not in body else ""
    text += "pools: {p: {kind: vllm}}\n" if "pools:" not in body else ""
    code, err = _plan(run_cli, tmp_path, text)
    assert code == 2 and "NUL" in err


def test_nul_bytes_in_extra_env_are_refused(run_cli: Run) -> None:
    code, out, err = run_cli(
        "plan", env={"LLMD_RECIPE": "vllm-single-pod", "LLMD_EXTRA_ENV": '{"A": "x\\u0000y"}'}
    )
    assert code == 2 and "NUL" in err and out == ""
    code, out, err = run_cli("plan", "--env", "A=x\0y", env={"LLMD_RECIPE": "vllm-single-pod"})
    assert code == 2 and "NUL" in err and out == ""


def test_nul_bytes_in_extra_args_are_refused(run_cli: Run) -> None:
    code, out, err = run_cli(
        "plan", "--extra-args", "--max-num-seqs 6\x004", env={"LLMD_RECIPE": "vllm-single-pod"}
    )
    assert code == 2 and "NUL" in err and out == ""
