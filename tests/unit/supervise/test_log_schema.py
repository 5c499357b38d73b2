"""One JSON schema for the launcher's lines and its children's: `timestamp`, `severity` (read from the
engines' own level prefixes), `process` (who wrote it), `message`; one object per line, scrubbed."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from launcher.contract.redact import REDACTED, Scrubber
from launcher.stderr import LAUNCHER
from launcher.supervise.logs import ChildOutput, FdWriter, configure
from launcher.supervise.severity import severity_of

REPO = Path(__file__).resolve().parents[3]

SECRET = "hf_abcdefghijklmnopqrstuvwxyz0123"
HEAD = ["timestamp", "severity", "process", "message"]

# Lines as the engines print them (formats cited in launcher/supervise/severity.py).
LINES = [
    ("(APIServer pid=4242) INFO 12-01 16:49:25 [api_server.py:1896] Starting vLLM API server", "INFO"),
    ("(EngineCore_DP0 pid=77) WARNING 12-01 16:49:26 [cpu.py:201] Pin memory is not supported", "WARNING"),
    ("(EngineCore_DP0 pid=77) ERROR 12-01 16:49:27 [core.py:710] EngineCore failed to start.", "ERROR"),
    ("DEBUG 12-01 16:49:25 [__init__.py:38] No plugins found.", "DEBUG"),
    ('(APIServer pid=4242) INFO:     127.0.0.1:50312 - "GET /health HTTP/1.1" 200 OK', "INFO"),
    ("[2026-12-01 16:49:25] INFO:     Started server process [123]", "INFO"),
    ("[2026-12-01 16:49:25 TP0] Load weight begin. avail mem=12.00 GB", "DEFAULT"),
    ("I1201 16:49:25.123456  4242 master_service.cpp:58] Master service started", "INFO"),
    ("W1201 16:49:25.123456  4242 client.cpp:120] Mount segment retried", "WARNING"),
    ("E1201 16:49:25.123456  4242 transfer_engine.cpp:99] Failed to register memory", "ERROR"),
    ("F1201 16:49:25.123456  4242 rpc.cpp:12] Check failed: ok", "CRITICAL"),
    ("Traceback (most recent call last):", "ERROR"),
    ("Loading safetensors checkpoint shards:  50% Completed | 1/2", "DEFAULT"),
    ("INFORMATION about the model", "DEFAULT"),  # a word starting with a level is not one
]


@pytest.mark.parametrize(("line", "severity"), LINES, ids=[s + ":" + line[:30] for line, s in LINES])
def test_severity_comes_from_the_engines_own_prefix(line: str, severity: str) -> None:
    assert severity_of(line) == severity


def _child_lines(lines: list[tuple[str, str]]) -> list[dict[str, object]]:
    read, write = os.pipe()
    output = ChildOutput(True, Scrubber([SECRET]))
    output.stdout = output.stderr = FdWriter(write, output._notice)
    for text, stream in lines:
        output.line("engine", stream, text)
    os.close(write)
    with os.fdopen(read) as pipe:
        return [json.loads(line) for line in pipe.read().splitlines()]


def test_a_childs_line_is_one_object_in_the_shared_schema() -> None:
    (warning, plain) = _child_lines(
        [
            (f"(EngineCore_DP0 pid=7) WARNING 12-01 16:49:26 [x.py:1] token {SECRET}", "stderr"),
            ("ready", "stdout"),
        ]
    )
    assert list(warning) == [*HEAD, "stream"]
    assert (
        warning["severity"] == "WARNING" and warning["process"] == "engine" and warning["stream"] == "stderr"
    )
    assert warning["message"] == f"(EngineCore_DP0 pid=7) WARNING 12-01 16:49:26 [x.py:1] token {REDACTED}"
    assert plain["severity"] == "DEFAULT" and plain["message"] == "ready"
    datetime.fromisoformat(str(warning["timestamp"]))


def test_the_launchers_own_line_has_the_same_head() -> None:
    stream = io.StringIO()
    log = configure(True, Scrubber([SECRET]), stream)
    log.error("spawn failed", process="engine", error=f"bad {SECRET}", message="aiohttp's")
    log.info("plan ready", recipe="r")
    failed, ready = (json.loads(line) for line in stream.getvalue().splitlines())
    assert list(failed)[:4] == HEAD and list(ready)[:4] == HEAD
    assert (
        failed["severity"] == "ERROR"
        and failed["process"] == LAUNCHER
        and failed["message"] == "spawn failed"
    )
    assert failed["child"] == "engine" and failed["logged"] == "aiohttp's"  # renamed, not lost
    assert failed["error"] == f"bad {REDACTED}"
    assert ready["severity"] == "INFO" and ready["recipe"] == "r"
    datetime.fromisoformat(str(ready["timestamp"]).replace("Z", "+00:00"))


def test_the_console_format_is_unchanged() -> None:
    stream = io.StringIO()
    configure(False, Scrubber([]), stream).info("plan ready", recipe="r")
    text = stream.getvalue()
    assert "plan ready" in text and "recipe=r" in text and "severity" not in text


def test_one_timestamp_form_and_tuples_as_lists_at_any_depth() -> None:
    """Issue #40.7: child lines said +00:00, the launcher's Z; a tuple in a mapping was its repr."""
    stream = io.StringIO()
    configure(True, Scrubber([SECRET]), stream).info(
        "network identity", env={"VLLM_HOST_IP": ("10.0.0.7", "POD_IP"), "HF_TOKEN": "x"}, pair=(1, SECRET)
    )
    line = json.loads(stream.getvalue())
    assert line["env"] == {"VLLM_HOST_IP": ["10.0.0.7", "POD_IP"], "HF_TOKEN": REDACTED}
    assert line["pair"] == [1, REDACTED]
    (child,) = _child_lines([("ready", "stdout")])
    assert str(line["timestamp"]).endswith("Z") and str(child["timestamp"]).endswith("Z")


@pytest.mark.parametrize("in_group", [False, True])
def test_with_json_logs_every_line_of_a_refused_input_is_json(in_group: bool, tmp_path: Path) -> None:
    """Issue #40.7: the problem lines and "no Kubernetes Event recorded" were text."""
    lws = {"LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_GROUP_SIZE": "1", "LWS_WORKER_INDEX": "0"}
    (tmp_path / "recipe.yaml").write_text("name: r\nmodle: {path: /m}\n")  # a misspelt key
    env = {
        "PATH": os.environ["PATH"],
        "LLMD_LOG_FORMAT": "json",
        "LLMD_RECIPE_FILE": str(tmp_path / "recipe.yaml"),
        "LLMD_TERMINATION_LOG": str(tmp_path / "termination-log"),
        "LLMD_PARK_SECONDS": "0",
        "LLMD_SERVICE_ACCOUNT_DIR": str(tmp_path),
        "LLMD_STALL_SECONDZ": "1",  # an unknown setting: a warning line
        **(lws if in_group else {}),
    }
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "run"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    messages = [line["message"] for line in lines]
    assert any("modle" in m for m in messages) and any("LLMD_STALL_SECONDZ" in m for m in messages)
    assert ("no Kubernetes Event recorded" in messages) is in_group  # outside an LWS nothing is tried
