"""The one reader of an engine's /metrics, against a loopback server: what forward progress (token
counters) and the KV-event watcher (served requests, by family) read, and each way it can fail."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from healthchecks.engine_metrics import counter_sum, read_counters, select
from healthchecks.http import NoAnswer, http_get
from healthchecks.kvevents.watcher import _requests_served
from tests.ports import free_port

VLLM = (
    "# HELP vllm:request_success_total Count of successfully processed requests.\n"
    "# TYPE vllm:request_success_total counter\n"
    'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 3.0\n'
    'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 2.0\n'
    'vllm:request_success_created{engine="0",finished_reason="stop",model_name="m"} 1.7e9\n'
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n'
    'vllm:num_requests_running_sum{engine="0"} 99.0\n'
)


def test_counter_sum_takes_exact_sample_names_only() -> None:
    assert counter_sum(VLLM, ("vllm:request_success_total", "vllm:num_requests_running")) == 6.0
    assert counter_sum(VLLM, ("vllm:prompt_tokens_total",)) is None


def _read(
    status: int, body: str, listen: bool = True
) -> tuple[tuple[float | None, str | None], float | None]:
    async def scenario() -> tuple[tuple[float | None, str | None], float | None]:
        async def metrics(_request: web.Request) -> web.Response:
            return web.Response(status=status, text=body)

        port, runner = free_port(), None
        if listen:
            app = web.Application()
            app.router.add_get("/metrics", metrics)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
        async with aiohttp.ClientSession() as session:
            read = await read_counters(session, "127.0.0.1", port, ("vllm:num_requests_running",), 1.0)
            served = await _requests_served(
                session, "127.0.0.1", port, ("vllm:request_success", "vllm:num_requests_running")
            )
        if runner is not None:
            await runner.cleanup()
        return read, served

    return asyncio.run(scenario())


def test_an_answering_engine_gives_the_sums() -> None:
    assert _read(200, VLLM) == ((1.0, None), 6.0)


def test_no_such_counter_is_none_but_no_served_request_is_zero() -> None:
    assert _read(200, "other_metric 5\n") == ((None, None), 0.0)


def test_an_error_status_or_no_answer_is_a_reason_and_no_count() -> None:
    assert _read(503, "") == ((None, "GET /metrics 503"), None)
    (total, why), served = _read(200, "", listen=False)
    assert total is None and served is None and why == "GET /metrics: Connection refused"


def test_samples_that_are_no_count_are_unknown_and_each_series_is_kept_apart() -> None:
    # #40.1: NaN, ±Inf and negative samples count nothing; a series at 1e20 stays its own
    text = (
        'vllm:generation_tokens_total{engine="0"} 7.0\n'
        'vllm:generation_tokens_total{engine="1"} 1e20\n'
        'vllm:generation_tokens_total{engine="2"} NaN\n'
        'vllm:generation_tokens_total{engine="3"} +Inf\n'
        'vllm:generation_tokens_total{engine="4"} -Inf\n'
        'vllm:generation_tokens_total{engine="5"} -1\n'
    )
    samples = select(text, ("vllm:generation_tokens_total",))
    assert samples.invalid == 4 and samples.exposed
    assert samples.valid == {
        ("vllm:generation_tokens_total", (("engine", "0"),)): 7.0,
        ("vllm:generation_tokens_total", (("engine", "1"),)): 1e20,
    }
    only_bad = select(
        'vllm:num_requests_running -1\nvllm:num_requests_running{a="b"} NaN\n', ("vllm:num_requests_running",)
    )
    assert only_bad.total is None and only_bad.exposed and not only_bad.valid
    assert counter_sum("vllm:num_requests_running NaN\n", ("vllm:num_requests_running",)) is None


def test_a_label_selector_matches_label_values_whole() -> None:
    text = 'sglang:realtime_tokens_total{mode="decode"} 2\nsglang:realtime_tokens_total{mode="decode_x"} 3\n'
    assert select(text, ('sglang:realtime_tokens_total{mode="decode"}',)).total == 2.0


def test_a_body_past_the_bound_is_no_answer_and_is_not_read() -> None:
    # #40.3: a body is read up to the caller's bound, never whole: longer is a failure, one line
    async def scenario() -> str:
        async def big(_request: web.Request) -> web.Response:
            return web.Response(body=b"x" * 100_000)

        port, app = free_port(), web.Application()
        app.router.add_get("/livez", big)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            async with aiohttp.ClientSession() as session:
                await http_get(session, f"http://127.0.0.1:{port}/livez", 2.0, read=65536)
        except NoAnswer as exc:
            return str(exc)
        finally:
            await runner.cleanup()
        return "answered"

    assert asyncio.run(scenario()) == "answered more than 65536 bytes"
