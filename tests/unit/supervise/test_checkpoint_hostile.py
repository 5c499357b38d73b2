"""A downloaded checkpoint is untrusted input: whatever its index and headers say, the check answers
with one problem per bad file, reads nothing outside the model directory, echoes no byte of a file,
and holds a bounded amount of memory however large the headers its shards declare."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.supervise.host import checkpoint
from tests.unit.supervise.test_host import model

ROOT = Path(__file__).resolve().parents[3]
TOKEN = b"hf_Secr3tTokenValue"


def _index(root: Path, weight_map: object) -> None:
    (root / checkpoint.INDEX).write_text(json.dumps({"weight_map": weight_map}))


@pytest.mark.parametrize("name", ["../token", "/TOKEN", "sub/../../token", "./../token"])
def test_an_index_naming_a_file_outside_the_model_is_refused_unread(tmp_path: Path, name: str) -> None:
    secret = tmp_path / "token"
    secret.write_bytes(TOKEN)
    root = model(tmp_path / "m")
    _index(root, {"w": name.replace("/TOKEN", str(secret))})
    (problem,) = checkpoint.check_checkpoint(str(root))
    assert "outside the model directory" in problem.message, problem.message
    (length,) = struct.unpack("<Q", TOKEN[:8])
    assert str(length) not in problem.line() and "hf_" not in problem.line()


def test_a_file_that_is_no_safetensors_is_not_echoed(tmp_path: Path) -> None:
    """Its first 8 bytes read as a header length must not reach the message (they may be a token).
    The digits are looked for outside the file's path: the path is the user's own and may hold them
    (pytest's numbered temp folder did: this failed whenever its number held "19"); the folder here
    holds them always."""
    (length,) = struct.unpack("<Q", TOKEN[:8])
    root = model(tmp_path / f"m{len(TOKEN)}-{length}")
    shard = root / "model-00001-of-00003.safetensors"
    shard.write_bytes(TOKEN + b"\n" * 64)
    (problem,) = checkpoint.check_checkpoint(str(root))
    assert str(shard) in problem.message
    pathless = problem.line().replace(str(shard), "<shard>")
    assert str(length) not in pathless and str(len(TOKEN)) not in pathless.split("(")[0], pathless


def test_tensor_names_are_not_echoed(tmp_path: Path) -> None:
    root = model(tmp_path / "m")
    header = json.dumps({"hf_Secr3t": {"dtype": "BF16", "shape": [1]}}).encode()
    (root / "model-00002-of-00003.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    (problem,) = checkpoint.check_checkpoint(str(root))
    assert "without data_offsets" in problem.message and "hf_Secr3t" not in problem.line()


@pytest.mark.parametrize(
    "weight_map",
    [{"w": 1}, {"w": 1, "v": 2}, {"w": None}, {"w": ["a"]}, {"w": {"a": 1}}, ["a"], "a", 5, {"w": True}],
    ids=repr,
)
def test_an_index_of_the_wrong_shape_is_one_problem(tmp_path: Path, weight_map: object) -> None:
    root = model(tmp_path / "m")
    _index(root, weight_map)
    (problem,) = checkpoint.check_checkpoint(str(root))
    assert "is not a safetensors index" in problem.message


def test_deeply_nested_json_is_one_problem(tmp_path: Path) -> None:
    """100,000 levels: a recursive parser's RecursionError must not escape as an internal error."""
    deep = b"[" * 100_000 + b"]" * 100_000
    root = model(tmp_path / "m")
    header = b'{"t": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2], "x": ' + deep + b"}}"
    (root / "model-00001-of-00003.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"xx")
    (problem,) = checkpoint.check_checkpoint(str(root))
    assert "model-00001-of-00003.safetensors" in problem.message
    (root / checkpoint.INDEX).write_bytes(b'{"weight_map": {"w": "a"}, "x": ' + deep + b"}")
    (problem,) = checkpoint.check_checkpoint(str(root))
    assert "is not a safetensors index" in problem.message


PEAK_RSS = """\
import json, sys
from launcher.supervise.host import checkpoint
def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith(key))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # peak RSS (VmHWM) := current RSS
before = status("VmRSS:")
problems = checkpoint.check_checkpoint(sys.argv[1])
print(json.dumps({"grown": status("VmHWM:") - before, "problems": len(problems)}))
"""


def hostile_model(root: Path, shards: int, header_bytes: int, fill: bytes) -> Path:
    """`shards` names for one file (hard links) whose header declares `header_bytes`: zeros (a sparse
    file), or a `{` and then `fill` with a counter spliced in (distinct JSON keys) up to that size."""
    model(root, shards=shards)
    paths = sorted(root.glob("*.safetensors"))
    for path in paths:
        path.unlink()
    with open(paths[0], "wb") as handle:
        handle.write(struct.pack("<Q", header_bytes))
        if fill != b"\0":
            count = header_bytes // len(fill)
            body = b"{" + (b"".join(fill % i for i in range(count)) if b"%" in fill else fill * count)
            handle.write(body[:header_bytes])
        handle.truncate(8 + header_bytes + 16)
    for path in paths[1:]:
        path.hardlink_to(paths[0])
    return root


@pytest.mark.parametrize(
    ("fill", "shards", "megabytes", "factor"),
    [(b"\0", 16, 8, 1), (b" ", 16, 8, 2), (b'"%x":{},', 4, 12, 2)],
    ids=["zeros", "spaces", "tiny-entries"],
)
def test_memory_is_bounded_whatever_size_the_headers_declare(
    tmp_path: Path, fill: bytes, shards: int, megabytes: int, factor: int
) -> None:
    """Shards declaring large headers, checked in a fresh process: its peak RSS grows by one header,
    not by every shard's header at once nor by a parser's many objects. Zeros are refused unread,
    spaces are read one header at a time, a million tiny entries are counted, not decoded.
    bench/checkpoint_memory.py measures 16 shards of 99 MB."""
    size = megabytes << 20
    root = hostile_model(tmp_path / "m", shards=shards, header_bytes=size, fill=fill)
    out = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, str(root)], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    result = json.loads(out)
    assert result["problems"] == shards
    assert result["grown"] < factor * size, result
