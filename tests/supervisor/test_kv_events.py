"""The launcher's KV-event watcher under `run`, against the STAND-IN publisher of tests/standins/vllm
(vLLM's wire format and replay protocol, scripted by STANDIN_KV): gaps recovered through replay,
gaps lost, a publisher restart, malformed messages and silence are each counted, and the launcher
keeps running. The real engine's events: tests/engines/test_kv_events.py."""

from __future__ import annotations

import http.client
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from tests.pods import STANDINS, LauncherPod
from tests.ports import free_port


def kv_pod(
    tmp_path: Path,
    script: str,
    *,
    layout: str = "",
    extra_env: dict[str, str] | None = None,
    router: str = "",
) -> LauncherPod:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    port, kv, replay = free_port(span=4), free_port(span=4), free_port(span=4)  # a port per local rank
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"name: standin-kv\nmodel: {{path: {model}, served_name: m}}\ndefault_pool: p\npools:\n  p:\n"
        f"    kind: vllm\n    port: {port}\n{layout}"
        f"    kv_events: {{port: {kv}, replay_port: {replay}, silence_seconds: 1, readiness: true}}\n"
        + (f"    router: {router}\n" if router else "")
    )
    env = {
        "LLMD_RECIPE_FILE": str(recipe),
        "POD_IP": "127.0.0.1",
        "LLMD_BIN_PATH": str(STANDINS),
        "LLMD_CHECK_INTERVAL": "0.2",
        "STANDIN_KV": script,
        **(extra_env or {}),
    }
    return LauncherPod(tmp_path, env, port=port, ports={"kv": kv, "replay": replay})


def kvevents(pod: LauncherPod) -> dict[str, Any]:
    data: dict[str, Any] = httpx.get(f"http://127.0.0.1:{pod.probe_port}/kvevents", timeout=5).json()
    return data


def metrics(pod: LauncherPod) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"http://127.0.0.1:{pod.probe_port}/metrics", timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def wait_until(pod: LauncherPod, what: str, timeout: float = 15.0) -> None:
    pod.wait_for(f"stand-in kv rank 0: {what} done", timeout=timeout)
    time.sleep(0.5)  # the watcher's replay round trip


def test_gaps_replay_resets_and_malformed_are_counted(tmp_path: Path) -> None:
    script = "wait=1.5,stored=3,drop=2,stored=1,wait=0.5,lose=2,stored=1,wait=0.5,malformed,reset,stored=2"
    pod = kv_pod(tmp_path, script, extra_env={"LLMD_KV_EVENTS_TOKEN_IDS": "true"}).start()
    try:
        wait_until(pod, "stored=2")
        rank = kvevents(pod)["ranks"]["0"]
        assert rank["port"] == pod.ports["kv"] and rank["replay_port"] == pod.ports["replay"]
        # 3 + 2 replayed + 1 + 1 + 2 after the reset; the 2 "lost" were never kept for replay.
        assert rank["batches"] == 9
        assert rank["events"] == {"BlockStored": 7, "AllBlocksCleared": 2}
        assert (rank["gaps"], rank["missed"], rank["recovered"], rank["lost"]) == (2, 4, 2, 2)
        assert rank["resets"] == 1 and rank["last_seq"] == 1
        assert kvevents(pod)["malformed"] == {"frames": 1, "sequence": 1, "msgpack": 1, "batch": 1}
        stored = kvevents(pod)["recent_block_stored"][-1]
        assert stored["token_ids"] == [24, 25, 26, 27] and stored["block_size"] == 4
        samples = metrics(pod)
        label = (("rank", "0"),)
        assert samples[("llmd_launcher_kv_event_batches_recovered_total", label)] == 2
        assert samples[("llmd_launcher_kv_event_batches_lost_total", label)] == 2
        assert samples[("llmd_launcher_kv_events_total", (("rank", "0"), ("type", "BlockStored")))] == 7
        assert samples[("llmd_launcher_kv_event_malformed_total", (("kind", "msgpack"),))] == 1
        assert samples[("llmd_launcher_kv_event_publisher_resets_total", label)] == 1
        assert pod.output().count("malformed KV-event message (logged once)") == 4  # once per kind
        assert pod.probe("livez")[0] == 200 and pod.probe("readyz")[0] == 200  # nothing served yet
        pod.signal(signal.SIGTERM)
        assert pod.finish() == 0
    finally:
        pod.kill_everything()


def test_kvevents_shows_no_token_ids_unless_the_setting_asks(tmp_path: Path) -> None:
    """Token ids are recent prompts and /kvevents answers anyone on the pod IP: by default the
    events show hashes, token counts and block sizes (LLMD_KV_EVENTS_TOKEN_IDS=true shows the ids,
    test_gaps_replay_resets_and_malformed_are_counted)."""
    pod = kv_pod(tmp_path, "wait=1.5,stored=2").start()
    try:
        wait_until(pod, "stored=2")
        recent = kvevents(pod)["recent_block_stored"]
        assert len(recent) == 2
        assert all("token_ids" not in e and e["tokens"] == 4 and e["block_size"] == 4 for e in recent)
        assert all(e["block_hashes"] for e in recent)
        pod.signal(signal.SIGTERM)
        assert pod.finish() == 0
    finally:
        pod.kill_everything()


def test_silence_while_serving_fails_readiness_when_the_recipe_asks(tmp_path: Path) -> None:
    """The stand-in serves on the test's cue, once the watcher has read the engine's count (/kvevents
    shows it): requests before that are history, not silence, and a slow machine cannot race it."""
    serve, resume = tmp_path / "serve", tmp_path / "resume"
    pod = kv_pod(tmp_path, f"until={serve},stored=1,served=3,until={resume},stored=1").start()
    try:
        pod.wait_probe("readyz", 200)
        deadline = time.monotonic() + 10
        while kvevents(pod)["ranks"]["0"]["requests_served"] != 0:
            assert time.monotonic() < deadline, kvevents(pod)
            time.sleep(0.1)
        serve.touch()  # a batch, then requests served, then silence
        body = pod.wait_probe("readyz", 503, timeout=10)
        assert list(body["failing"]) == ["kv-events"]
        assert body["failing"]["kv-events"] == "no KV events from rank(s) [0] while requests were served"
        assert metrics(pod)[("llmd_launcher_kv_event_silent", (("rank", "0"),))] == 1
        assert "KV events silent while the engine serves requests" in pod.output()
        resume.touch()
        pod.wait_probe("readyz", 200, timeout=10)  # the next batch: flowing again
        assert pod.probe("livez")[0] == 200
        pod.signal(signal.SIGTERM)
        assert pod.finish() == 0
    finally:
        pod.kill_everything()


def test_a_block_size_other_than_the_routers_is_shown_and_unreadies_when_asked(tmp_path: Path) -> None:
    """The stand-in publishes BlockStored with block_size 4; a router expecting 16 (readiness on)
    sees the mismatch in /kvevents, the metric, the log (once) and /readyz; one expecting 4 does not."""
    script = "wait=1.5,stored=3,wait=30"
    pod = kv_pod(tmp_path, script, router="{block_size_tokens: 16, readiness: true}").start()
    try:
        wait_until(pod, "stored=3")
        body = pod.wait_probe("readyz", 503, timeout=10)
        assert body["failing"]["kv-events"] == (
            "KV-event block size {0: 4} differs from the router's blockSizeTokens 16"
        )
        rank = kvevents(pod)["ranks"]["0"]
        assert (rank["block_size"], rank["block_size_mismatch"]) == (4, True)
        assert metrics(pod)[("llmd_launcher_kv_event_block_size_mismatch", (("rank", "0"),))] == 1
        assert pod.output().count("KV-event block size differs from the router's blockSizeTokens") == 1
        pod.signal(signal.SIGTERM)
        assert pod.finish() == 0
    finally:
        pod.kill_everything()
    agreeing = tmp_path / "agreeing"
    agreeing.mkdir()
    pod = kv_pod(agreeing, script, router="{block_size_tokens: 4, readiness: true}").start()
    try:
        wait_until(pod, "stored=3")
        rank = kvevents(pod)["ranks"]["0"]
        assert (rank["block_size"], rank["block_size_mismatch"]) == (4, False)
        assert pod.probe("readyz")[0] == 200
        assert metrics(pod)[("llmd_launcher_kv_event_block_size_mismatch", (("rank", "0"),))] == 0
        pod.signal(signal.SIGTERM)
        assert pod.finish() == 0
    finally:
        pod.kill_everything()


def test_each_local_rank_is_watched_on_its_compensated_port(tmp_path: Path) -> None:
    """Pod 1 of a 2-pod data-parallel group owns global ranks 2 and 3; vLLM offsets the endpoint by
    the global rank, the plan lowers the base by 2, so they publish on port and port + 1."""
    layout = (
        "    layout: data-parallel\n    nodes: 2\n    data_parallel_local: 2\n"
        f"    supervisor_port: {free_port()}\n    dp_rpc_port: {free_port()}\n"
    )
    lws = {"LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}
    pod = kv_pod(tmp_path, "wait=1.5,stored=2", layout=layout, extra_env=lws)
    pod.start()
    try:
        pod.wait_for("stand-in kv rank 3: stored=2 done")
        pod.wait_for("stand-in kv rank 2: stored=2 done")
        time.sleep(0.5)
        ranks = kvevents(pod)["ranks"]
        assert {r: (v["port"], v["batches"]) for r, v in ranks.items()} == {
            "2": (pod.ports["kv"], 2),
            "3": (pod.ports["kv"] + 1, 2),
        }
        pod.signal(signal.SIGTERM)
        assert pod.finish() == 0
    finally:
        pod.kill_everything()


FLOOD_RSS = 256 * 2**20  # bytes: generous (the bounded launcher peaks near 64 MiB; unbounded, ~1 GiB)
PROBE_DEADLINE = 1.0  # seconds: the kubelet's default timeoutSeconds


def livez_seconds(pod: LauncherPod) -> float:
    """One /livez on a new connection, as the kubelet probes (the stdlib client: little cost of its
    own on a loaded machine); how long the answer took, PROBE_DEADLINE or more when it missed."""
    began = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", pod.probe_port, timeout=PROBE_DEADLINE)
    try:
        conn.request("GET", "/livez")
        if conn.getresponse().status != 200:
            return float("inf")
    except OSError:
        return float("inf")
    finally:
        conn.close()
    return time.monotonic() - began


def test_a_flooding_publisher_neither_grows_the_launcher_nor_delays_its_probes(tmp_path: Path) -> None:
    """Issue #24 item 5: a publisher sending as fast as pyzmq can (vLLM's send queue of 100,000) for
    5 s. The launcher's SUB socket holds a bounded queue, so its RSS stays under FLOOD_RSS (the excess
    waits in, then is dropped by, the publisher), and it decodes in slices, so every /livez answers
    within the kubelet's 1 s. Measured: bench/kvevents_flood.py."""
    pod = kv_pod(tmp_path, "wait=1.5,flood=5").start()
    try:
        pod.wait_for("stand-in kv rank 0: wait=1.5 done")
        launcher = psutil.Process(pod.pid)
        peak, slowest, probes = 0, 0.0, 0
        while "flood=5 done" not in pod.output():
            peak = max(peak, launcher.memory_info().rss)
            slowest = max(slowest, livez_seconds(pod))
            probes += 1
            time.sleep(0.05)
        assert probes >= 5
        assert peak < FLOOD_RSS, f"launcher RSS reached {peak / 2**20:.0f} MiB under the flood"
        assert slowest < PROBE_DEADLINE, f"a /livez took {slowest:.2f} s under the flood"
        assert kvevents(pod)["ranks"]["0"]["batches"] > 0  # the watcher kept reading meanwhile
        pod.signal(signal.SIGTERM)
        assert pod.finish() == 0
    finally:
        pod.kill_everything()
