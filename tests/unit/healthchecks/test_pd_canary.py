"""The P/D canary (LLMD_PD_CANARY_PREFILLER, issue #32 item 3): the setting refused unless it is
host:port (one line, exit 2); planned only for a pod whose serving engine has a disagg sidecar (plan
JSON and text; a note otherwise); sent through the sidecar with the router's x-prefiller-host-port
header and the engine's key, counted by outcome in /metrics with pool and role, never a verdict."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from healthchecks.forward import ForwardWatcher
from healthchecks.pd_canary import PdCanaryWatcher
from launcher.contract.plan import PdCanary, PdRole, ProgressSource, ProgressWatch
from tests.ports import free_port
from tests.unit.healthchecks.loopback import completion_canary, serve_engine
from tests.unit.healthchecks.test_canary import BUSY, COUNTERS, KEY, Engine, Recorder, _exposition
from tests.unit.healthchecks.test_probe_rules import ROLES

DECODE, PREFILL = ROLES["decode"][0], ROLES["prefill-leader"][0]
SETTING = "LLMD_PD_CANARY_PREFILLER"


@pytest.mark.parametrize(
    "value", ["10.64.1.10:8000", "[fd00::a]:8000", "prefill.llm-d.svc.cluster.local:8000"]
)
def test_a_prefill_endpoint_is_planned_through_the_decode_pods_sidecar(
    plan_json: Any, run_cli: Any, value: str
) -> None:
    probes = plan_json(env={**DECODE, SETTING: value})["probes"]
    assert probes["pd_canary"] == {"prefiller": value, "port": 8000, "tls": False}
    _, out, _ = run_cli("plan", env={**DECODE, SETTING: value})
    assert (
        f"  P/D canary: every 60 s the canary through the disagg sidecar (http :8000) with "
        f"x-prefiller-host-port: {value} (LLMD_PD_CANARY_PREFILLER), within 20 s: prefill there, KV "
        "transfer, decode here; counted (llmd_launcher_pd_canary_total) and shown in /livez, never a "
        "verdict\n"
    ) in out


def test_off_by_default_and_said_where_no_sidecar_can_carry_it(plan_json: Any) -> None:
    assert plan_json(env=DECODE)["probes"]["pd_canary"] is None
    prefill = plan_json(env={**PREFILL, SETTING: "10.64.2.2:8000"})
    assert prefill["probes"]["pd_canary"] is None
    assert any(n.startswith(f"{SETTING} is set but this pod sends no P/D canary") for n in prefill["notes"])


@pytest.mark.parametrize(
    "value",
    [
        *(
            "fd00::a:8000",
            "10.64.1.10",
            "host:0",
            "host:65536",
            "http://host:8000",
            "a b:80",
            "[host]:80",
            "",
        ),
        # #40.3: matched whole, so no newline slips past `$` into the header; no zone, no non-ASCII digit
        *("pf\n:8000", "pf:8000\n", "[fe80::1%eth0]:8000", "pf:\uff18\uff10"),
    ],
)
def test_anything_but_host_port_is_one_line_exit_2(run_cli: Any, value: str) -> None:
    code, out, err = run_cli("plan", env={**DECODE, SETTING: value})
    assert code == 2 and out == "", err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and SETTING in lines[0] and "host:port" in lines[0], err


def _pd_watch(engine: Engine, sidecar: Engine, seconds: float) -> tuple[PdCanaryWatcher, Recorder]:
    """The engine watched as a source (its own canary answers); the P/D canary to `sidecar`."""

    async def scenario() -> tuple[PdCanaryWatcher, Recorder]:
        port, sidecar_port = free_port(), free_port()
        runners = [await serve_engine(engine, port), await serve_engine(sidecar, sidecar_port)]
        watch = ProgressWatch(
            (ProgressSource("engine", port),), COUNTERS, completion_canary(), 0.2, 0.5, busy=BUSY,
            role=PdRole.DECODE,
        )  # fmt: skip
        log = Recorder()
        pd = PdCanary("10.64.1.10:8000", sidecar_port, tls=False)
        forward = ForwardWatcher(watch, lambda: True, 0.05, 0.5, log, KEY)
        watcher = PdCanaryWatcher(pd, watch, lambda: True, 0.05, log, KEY, pool="decode")
        tasks = [asyncio.create_task(forward.run()), asyncio.create_task(watcher.run())]
        try:
            await asyncio.wait(tasks, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
            for task in tasks:
                if task.done():
                    task.result()
            assert forward.stalled is None
            return watcher, log
        finally:
            for task in tasks:
                task.cancel()
            for runner in runners:
                await runner.cleanup()

    return asyncio.run(scenario())


def test_the_pd_canary_carries_the_prefiller_header_and_the_key_and_counts_ok() -> None:
    sidecar = Engine(key=KEY)
    watcher, _ = _pd_watch(Engine(key=KEY), sidecar, 1.0)
    assert len(sidecar.canaries) >= 3  # one per 0.2 s window
    assert {(c["x-prefiller-host-port"], c["Authorization"]) for c in sidecar.canaries} == {
        ("10.64.1.10:8000", f"Bearer {KEY}")
    }
    metrics = _exposition(watcher)
    assert (
        f'llmd_launcher_pd_canary_total{{outcome="ok",pool="decode",role="decode"}} {len(sidecar.canaries)}.0'
        in metrics
    )
    assert 'llmd_launcher_pd_canary_total{outcome="failed",pool="decode",role="decode"} 0.0' in metrics
    assert watcher.live_facts()["pd_canary"]["latest"].startswith("answered in ")


def test_a_failing_two_step_path_is_counted_and_told_never_a_verdict() -> None:
    watcher, log = _pd_watch(Engine(key=KEY), Engine(key=KEY, status=502), 1.0)
    assert watcher.not_live() is None
    facts = watcher.live_facts()["pd_canary"]
    assert (
        facts["latest"] == "failed: HTTP 502"
        and facts["counts"]["failed"] >= 3
        and facts["counts"]["ok"] == 0
    )
    assert 'llmd_launcher_pd_canary_total{outcome="failed",pool="decode",role="decode"}' in _exposition(
        watcher
    )
    assert log.warnings() == ["P/D canary failed: HTTP 502 (never a verdict)"]  # told once, when it changed
    assert KEY not in log.text()
