"""The Kubernetes Event that keeps a pod's reason after LWS recreates its group (issue #33, item 3),
against the loopback STAND-IN of the API server's Events endpoint (tests/kube_api.py), never a real
cluster: what is sent (method, path, bearer token, a core/v1 Event on the LeaderWorkerSet), and the
cases where nothing is recorded, each one log line and bounded in time."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from launcher.config.settings import env_value
from launcher.contract.exits import EVENT_REASONS, EXIT_CODES
from launcher.supervise import kube_post
from launcher.supervise.kube_event import EventRecorder, EventSettings
from tests.kube_api import EventsApi, make_certificates, serve_events_api
from tests.unit.supervise.test_supervisor import RecordingLog

MESSAGE = "VLLM_PORT: is 'tcp://10.96.0.12:8000', a Kubernetes service link; set enableServiceLinks: false"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[EventsApi]:
    yield from serve_events_api(tmp_path)


def _recorder(environ: dict[str, str], log: RecordingLog, seconds: float = 2.0) -> EventRecorder:
    """Its settings as `run` reads them (launcher/config/settings.py), from this env."""
    settings = EventSettings.read(lambda field: env_value(field, environ))
    return EventRecorder(replace(settings, seconds=seconds), log, environ)


def _record(api: EventsApi, environ: dict[str, str], log: RecordingLog, seconds: float = 2.0) -> bool:
    return _recorder(environ, log, seconds).record("BadInput", MESSAGE)


def test_the_event_is_posted_on_the_lws_with_the_pods_own_token(api: EventsApi) -> None:
    log = RecordingLog()
    assert _record(api, api.env(), log) is True
    (seen,) = api.seen
    print("recorded request:", seen.method, seen.path, json.dumps(seen.body, indent=1))  # for the note
    assert (seen.method, seen.path) == ("POST", "/api/v1/namespaces/llm-d/events")
    assert seen.headers["Authorization"] == f"Bearer {api.token}"
    assert seen.headers["Content-Type"] == "application/json"
    body = seen.body
    assert body["involvedObject"] == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "name": "kimi-decode",
        "namespace": "llm-d",
    }
    assert body["reason"] == "BadInput" and body["type"] == "Warning"
    assert body["message"] == f"pod kimi-decode-0: {MESSAGE}"
    assert body["source"] == {"component": "llm-d-launcher"}
    assert (body["reportingComponent"], body["reportingInstance"]) == ("llm-d-launcher", "kimi-decode-0")
    assert body["related"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "kimi-decode-0",
        "namespace": "llm-d",
    }
    assert body["metadata"] == {"generateName": "kimi-decode.", "namespace": "llm-d"}
    assert body["firstTimestamp"].endswith("Z") and body["count"] == 1
    kubernetes_validate.validate(body, "1.33", strict=True)  # the core/v1 Event schema, no unknown field
    assert ("info", "Kubernetes Event recorded") in [(lvl, e) for lvl, e, _ in log.records]
    assert api.token not in repr(log.records)


def test_only_the_first_line_is_sent_and_a_long_one_is_cut(api: EventsApi) -> None:
    assert _recorder(api.env(), RecordingLog()).record(
        "EngineExit", "x" * 5000 + "\nlast output:\nsecret stuff"
    )
    message = api.seen[0].body["message"]
    assert "last output" not in message and len(message.encode()) == 1024


def test_a_refusing_api_is_one_warning_naming_its_answer(api: EventsApi) -> None:
    api.answer = 403
    log = RecordingLog()
    assert _record(api, api.env(), log) is False
    assert [(lvl, e) for lvl, e, _ in log.records] == [("warning", "no Kubernetes Event recorded")]
    assert "the API server answered 403: events is forbidden" in log.records[0][2]["why"]
    assert api.token not in repr(log.records)


@pytest.mark.parametrize(
    ("drop", "why"),
    [
        ("token", "no ServiceAccount token is mounted at"),
        ("LWS_NAME", "LWS_NAME is not set"),
        (
            "KUBERNETES_SERVICE_HOST",
            "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT do not name the API server",
        ),
    ],
)
def test_nothing_to_post_with_is_one_line_and_no_request(api: EventsApi, drop: str, why: str) -> None:
    environ = api.env()
    if drop == "token":
        (api.account_dir / "token").unlink()
    else:
        del environ[drop]
    log = RecordingLog()
    assert _record(api, environ, log) is False
    assert len(log.records) == 1 and log.records[0][1] == "no Kubernetes Event recorded"
    assert log.records[0][2]["why"].startswith(why)
    assert api.seen == []


def test_an_api_that_never_answers_costs_at_most_the_bound(api: EventsApi) -> None:
    """A listener that accepts connections and never speaks: the caller waits LLMD_EVENT_SECONDS."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        environ = {**api.env(), "KUBERNETES_SERVICE_PORT": str(silent.getsockname()[1])}
        log = RecordingLog()
        began = time.monotonic()
        assert _record(api, environ, log, seconds=0.5) is False
        assert time.monotonic() - began < 1.5
        why = log.records[0][2]["why"]
        assert why == "no answer within 0.5 s" or "timed out" in why
    finally:
        silent.close()


def test_an_unreachable_api_is_one_warning(api: EventsApi) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there
    log = RecordingLog()
    began = time.monotonic()
    assert _record(api, {**api.env(), "KUBERNETES_SERVICE_PORT": str(port)}, log) is False
    assert time.monotonic() - began < 2.0
    assert "ConnectionRefusedError" in log.records[0][2]["why"]


def test_a_certificate_not_signed_by_the_mounted_ca_is_refused(api: EventsApi, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (api.account_dir / "ca.crt").write_bytes(make_certificates(other)[0].read_bytes())
    log = RecordingLog()
    assert _record(api, api.env(), log) is False
    assert "CERTIFICATE_VERIFY_FAILED" in log.records[0][2]["why"] and api.seen == []


def test_llmd_event_seconds_0_records_nothing(api: EventsApi) -> None:
    log: Any = RecordingLog()
    assert _record(api, api.env(), log, seconds=0) is False
    assert log.records == [] and api.seen == []


def test_a_reason_is_recorded_once_as_client_gos_recorder_would(api: EventsApi) -> None:
    recorder = _recorder(api.env(), RecordingLog())
    assert recorder.record("BadInput", MESSAGE) is True
    assert recorder.record("BadInput", MESSAGE + "\nanother last line") is False  # the same first line
    assert recorder.record("EngineExit", MESSAGE) is True
    assert [seen.body["reason"] for seen in api.seen] == ["BadInput", "EngineExit"]


def test_a_token_of_two_lines_is_refused_without_a_request_and_never_shown(api: EventsApi) -> None:
    (api.account_dir / "token").write_text("first-half\r\nsecond-half")
    log = RecordingLog()
    assert _record(api, api.env(), log) is False
    (said,) = log.records
    assert said[1] == "no Kubernetes Event recorded" and "not one header-safe line" in said[2]["why"]
    assert "half" not in repr(log.records) and api.seen == []


def test_no_ca_crt_is_no_event_unless_the_system_trust_store_is_allowed(api: EventsApi) -> None:
    (api.account_dir / "ca.crt").unlink()
    log = RecordingLog()
    assert _record(api, api.env(), log) is False
    assert "no CA at" in log.records[0][2]["why"] and api.seen == []
    log = RecordingLog()
    assert _record(api, {**api.env(), "LLMD_EVENT_SYSTEM_CA": "true"}, log) is False
    assert "CERTIFICATE_VERIFY_FAILED" in log.records[0][2]["why"]  # tried: the test CA is in no store


def test_any_failure_inside_the_recorder_is_one_line_without_the_token(
    api: EventsApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> str | None:
        raise ValueError(f"Invalid header value b'Bearer {api.token}'")

    monkeypatch.setattr(kube_post, "post_event", broken)
    log = RecordingLog()
    assert _record(api, api.env(), log) is False
    (said,) = log.records
    assert said[:2] == ("warning", "no Kubernetes Event recorded") and "ValueError" in said[2]["why"]
    assert api.token not in repr(log.records)


def test_event_reasons_are_short_upper_camel_case_one_per_exit_code() -> None:
    assert EVENT_REASONS["bad-input"] == "BadInput" and EVENT_REASONS["engine-exit"] == "EngineExit"
    assert len(set(EVENT_REASONS.values())) == len(EXIT_CODES)
    assert all(r.isalnum() and r[0].isupper() and len(r) <= 24 for r in EVENT_REASONS.values())
