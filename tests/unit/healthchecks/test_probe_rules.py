"""Probe rules per role (written out from the issue and docs/probes-and-watchers.md, not generated), the
start-up progress parser on the engines' own line formats, and PodHealth's answers."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

import pytest

from healthchecks.progress import StartupProgress
from healthchecks.state import CheckResult, PodHealth
from launcher.contract.lifecycle import Lifecycle
from launcher.contract.phases import DISTRIBUTED_INIT, INITIALIZING, LOADING_WEIGHTS, STARTING_SERVER
from launcher.contract.plan import Check, HttpCheck, Probes, ProcessSpec
from launcher.contract.stop import RUNNING, Failed, StopRequested, StopState
from roles.engines.sglang import SGLANG
from roles.engines.vllm import VLLM
from tests.unit.roles.test_golden_kimi import DECODE_LEADER, PREFILL_LEADER, TPU_LEADER, lws


def http(name: str, port: int, path: str = "/health") -> dict[str, Any]:
    return {"name": name, "process": name, "http": {"port": port, "path": path}}


# A serving pod's required capabilities (roles/capabilities.py) gate its readiness.
CAPABILITIES = {
    "name": "capabilities",
    "process": "engine",
    "capabilities": "every required capability present",
}


ROLES = {
    "prefill-leader": (
        lws(PREFILL_LEADER, 2, 0, "10.64.1.10", "prefill"),
        {
            "port": 8090,
            "ready": [http("engine", 8000), http("render", 8089), CAPABILITIES],
            "started": http("engine", 8000),
            "progress": "vllm",
        },
    ),
    "prefill-worker": (
        {**lws(PREFILL_LEADER, 2, 1, "10.64.1.11", "prefill"), "LWS_LEADER_ADDRESS": "10.64.1.10"},
        {
            "port": 8090,
            "ready": [
                {"name": "engine", "process": "engine"},
                {"name": "leader", "process": "engine", "tcp": {"host": "10.64.1.10", "port": 8000}},
            ],
            "started": {"name": "leader", "process": "engine", "tcp": {"host": "10.64.1.10", "port": 8000}},
            "progress": "vllm",
        },
    ),
    "decode": (  # every decode pod serves: the DP supervisor, never the sidecar, speaks for the engine
        lws(DECODE_LEADER, 4, 2, "10.64.2.2", "decode"),
        {
            "port": 8090,
            "ready": [
                {"name": "engine", "process": "engine", "http": {"port": 8208, "path": "/readyz"}},
                http("disagg-sidecar", 8000),
                CAPABILITIES,
            ],
            "started": {"name": "engine", "process": "engine", "http": {"port": 8208, "path": "/readyz"}},
            "progress": "vllm",
        },
    ),
    "tpu-leader": (
        lws(TPU_LEADER, 4, 0, "10.64.3.0", "tpu"),
        {
            "port": 8090,
            "ready": [http("engine", 30000), CAPABILITIES],
            "started": http("engine", 30000),
            "progress": "sglang",
        },
    ),
    "tpu-worker": (
        {**lws(TPU_LEADER, 4, 3, "10.64.3.3", "tpu"), "LWS_LEADER_ADDRESS": "10.64.3.0"},
        {
            "port": 8090,
            "ready": [
                {"name": "engine", "process": "engine"},
                {"name": "leader", "process": "engine", "tcp": {"host": "10.64.3.0", "port": 30000}},
            ],
            "started": {"name": "leader", "process": "engine", "tcp": {"host": "10.64.3.0", "port": 30000}},
            "progress": "sglang",
        },
    ),
    "mooncake-master": (
        {"LLMD_POOL": "mooncake-master"},
        {
            "port": 8090,
            "ready": [http("mooncake-master", 9003)],
            "started": http("mooncake-master", 9003),
            "progress": None,
        },
    ),
    "mooncake-donor": (
        {"LLMD_POOL": "mooncake-donor", "POD_IP": "10.64.5.7", "LLMD_PROBE_PORT": "8091"},
        {
            "port": 8091,
            "ready": [http("mooncake-donor", 9300)],
            "started": http("mooncake-donor", 9300),
            "progress": None,
        },
    ),
}


@pytest.mark.parametrize("role", ROLES)
def test_probe_rules_per_role(plan_json: Any, role: str) -> None:
    env, expected = ROLES[role]
    plan = plan_json(env=env)
    assert plan["role"]["name"] == role
    shown_elsewhere = ["peers", "peer_lost_seconds", "forward", "forward_watched_by", "startup_seconds"]
    shown_elsewhere += ["kv_transfer", "pd_canary"]  # beside forward: tested below and in test_pd_canary
    probes = {k: v for k, v in plan["probes"].items() if k not in shown_elsewhere}
    assert probes == expected


FORWARD = {  # role: (its API servers watched for forward progress, headless pods covered, watched by)
    "prefill-leader": ([("engine", 8000)], ["worker 1"], None),
    "prefill-worker": ([], [], "leader"),
    "decode": ([(f"rank {r}", 8200 + r - 8) for r in range(8, 12)], [], None),
    "tpu-leader": ([("engine", 30000)], ["worker 1", "worker 2", "worker 3"], None),
    "tpu-worker": ([], [], "leader"),
    "mooncake-master": ([], [], None),
    "mooncake-donor": ([], [], None),
}


@pytest.mark.parametrize("role", ROLES)
def test_forward_progress_watch_per_role(plan_json: Any, role: str) -> None:
    """Each serving engine is watched (every DP rank on its own port); a headless worker is covered by
    its leader's watch, and its plan says so; services are not watched."""
    env, _ = ROLES[role]
    probes = plan_json(env=env)["probes"]
    sources, covers, watched_by = FORWARD[role]
    watch = probes["forward"]
    assert ([(s["name"], s["port"]) for s in watch["sources"]] if watch else []) == sources
    assert (watch["covers"] if watch else []) == covers
    assert probes["forward_watched_by"] == watched_by
    assert probes["startup_seconds"] == 2700.0
    if watch:
        assert watch["model"] == "moonshotai/Kimi-K3.1-Pro"
        assert (watch["stall_seconds"], watch["canary_seconds"]) == (60.0, 20.0)
        assert watch["role"] == P_D_ROLE[role]
        assert watch["steps"]["seconds"] == 180.0
        assert watch["counters"] == watch["steps"]["signals"] == COUNTERS[watch["role"]]


P_D_ROLE = {"prefill-leader": "prefill", "decode": "decode", "tpu-leader": "prefill and decode"}
COUNTERS = {  # #32: decode watches its generation only, prefill its prompt side (a chunk moves the KV usage)
    "decode": ["vllm:generation_tokens_total"],
    "prefill": ["vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:kv_cache_usage_perc"],
    "prefill and decode": [
        'sglang:realtime_tokens_total{mode="decode"}',
        'sglang:realtime_tokens_total{mode="prefill_compute"}',
        'sglang:realtime_tokens_total{mode="prefill_cache"}',
    ],
}


def test_p_d_pods_relay_their_connectors_kv_transfer_counters(plan_json: Any) -> None:
    decode = plan_json(env=ROLES["decode"][0])["probes"]
    assert "vllm:nixl_num_failed_transfers_total" in decode["kv_transfer"]
    assert "vllm:mooncake_store_operation_failed_keys_total" in decode["kv_transfer"]
    assert "vllm:external_prefix_cache_hits_total" in decode["kv_transfer"]
    assert plan_json(env=ROLES["tpu-leader"][0])["probes"]["kv_transfer"] == []


def test_stall_seconds_zero_watches_nothing(plan_json: Any) -> None:
    env, _ = ROLES["decode"]
    assert plan_json(env={**env, "LLMD_STALL_SECONDS": "0"})["probes"]["forward"] is None


def _worker(leader: str, index: int) -> str:
    """LWS names worker i `<lws>-<group>-<i>` under the leader's subdomain."""
    first, rest = leader.split(".", 1)
    return f"{first}-{index}.{rest}"


PEERS = {
    "prefill-leader": [("worker 1", _worker(PREFILL_LEADER, 1))],
    "prefill-worker": [("leader", "10.64.1.10")],
    "decode": [("leader", DECODE_LEADER)],
    "tpu-leader": [(f"worker {i}", _worker(TPU_LEADER, i)) for i in (1, 2, 3)],
    "tpu-worker": [("leader", "10.64.3.0")],
    "mooncake-master": [],
    "mooncake-donor": [],
}


@pytest.mark.parametrize("role", ROLES)
def test_group_peers_per_role(plan_json: Any, role: str) -> None:
    """The leader watches every worker by its LWS DNS name, a worker its leader; services no one."""
    env, expected = ROLES[role]
    probes = plan_json(env=env)["probes"]
    assert [(p["name"], p["host"]) for p in probes["peers"]] == PEERS[role]
    assert {p["port"] for p in probes["peers"]} <= {expected["port"]}
    assert probes["peer_lost_seconds"] == 10.0


def test_no_peers_without_names_or_when_switched_off(plan_json: Any) -> None:
    by_ip = plan_json(
        env={**lws(PREFILL_LEADER, 2, 0, "10.64.1.10", "prefill"), "LWS_LEADER_ADDRESS": "10.64.1.10"}
    )
    assert by_ip["probes"]["peers"] == []  # worker names follow from the leader's DNS name only
    off = plan_json(env={**lws(PREFILL_LEADER, 2, 0, "10.64.1.10", "prefill"), "LLMD_PEER_LOST_SECONDS": "0"})
    assert off["probes"]["peers"] == []


def test_probe_port_may_not_be_a_port_of_the_pod(run_cli: Any) -> None:
    code, _, err = run_cli("plan", env={"LLMD_PROBE_PORT": "8089", **ROLES["prefill-leader"][0]})
    assert code == 2
    assert err == (
        "llm-d-launcher: error: LLMD_PROBE_PORT: 8089 is also render's render port; set LLMD_PROBE_PORT "
        "to a port no process of the pod uses (default 8090)\n"
    )
    code, _, err = run_cli("plan", env={"LLMD_PROBE_PORT": "0"})
    assert code == 2 and err.startswith("llm-d-launcher: error: LLMD_PROBE_PORT")


def test_text_plan_says_how_the_pod_is_probed(run_cli: Any) -> None:
    _, out, _ = run_cli("plan", env=ROLES["decode"][0])
    assert out.endswith(
        "probes on :8090 (/livez /readyz /startupz /metrics)\n"
        "  ready when: engine (GET :8208/readyz = 200), disagg-sidecar (GET :8000/health = 200), "
        "capabilities (every required capability present)\n"
        "  started when: engine (GET :8208/readyz = 200) passes once; start-up progress read from "
        "vllm's output\n"
        "  start-up deadline: 2700 s, then the pod ends (exit 6) naming its phase\n"
        "  forward progress: vllm:generation_tokens_total on rank 8 :8200, "
        "rank 9 :8201, rank 10 :8202, rank 11 :8203 /metrics; still for 60 s and "
        "vllm:num_requests_running / vllm:num_requests_waiting at 0: canary POST /v1/completions "
        '{"model": "moonshotai/Kimi-K3.1-Pro", "prompt": "Hi", "max_tokens": 1, "temperature": 0} '
        "with its key from $VLLM_API_KEY within 20 s, else (a timeout, no connection, a 5xx) stalled: "
        "/livez 503, exit 5; a 4xx is a wrong canary, logged once, never a stall\n"
        "  busy (decode): vllm:num_requests_running > 0 and no step (vllm:generation_tokens_total still) "
        "for 180 s (LLMD_STEP_SECONDS): stalled, exit 5, no canary\n"
        "  a sample that is NaN, ±Inf or negative, or missing, is unknown: never progress, never busy; "
        "counters unknown (or /metrics unanswered) are judged as still ones, /livez says since when\n"
        "  KV transfer: vllm:nixl_num_failed_transfers_total / vllm:nixl_num_failed_notifications_total / "
        "vllm:nixl_num_kv_expired_reqs_total / vllm:nixl_xfer_time_seconds_count / "
        "vllm:mooncake_store_operation_total / vllm:mooncake_store_operation_failed_keys_total / "
        "vllm:external_prefix_cache_queries_total / vllm:external_prefix_cache_hits_total relayed into "
        "/metrics (llmd_launcher_engine_kv_transfer_total, with pool and role)\n"
    )


# ------------------------------------------------------------------ start-up progress
# Lines as the engines print them (vLLM 0.32 weight_utils.py _BAR_FORMAT; tqdm's default l_bar as in
# SGLang's fastsafetensors path); the prefixes are vLLM's per-process log prefixes.
VLLM_LINES = [
    "(EngineCore pid=4242) INFO 11-30 12:00:01 [cpu_model_runner.py:68] Starting to load model /m...",
    "(EngineCore pid=4242) Loading safetensors checkpoint shards:   0% Completed | 0/3 [00:00<?, ?it/s]",
    "(EngineCore pid=4242) Loading safetensors checkpoint shards:  33% Completed | 1/3 [00:04<00:08, 4s/it]",
]


def test_vllm_bar_and_phases() -> None:
    progress = StartupProgress(VLLM.startup_output("0.32.0"))
    assert progress.feed(VLLM_LINES[0]) and progress.phase == LOADING_WEIGHTS
    assert progress.weight_ratio is None
    progress.feed(VLLM_LINES[1])
    assert progress.weight_ratio == 0
    progress.feed(VLLM_LINES[2])
    assert progress.weight_ratio == pytest.approx(1 / 3)
    assert progress.as_dict()["shards"] == [
        {
            "rank": "EngineCore pid=4242",
            "what": "Loading safetensors checkpoint shards",
            "loaded": 1,
            "total": 3,
        }
    ]
    assert progress.feed(
        "(EngineCore pid=4242) INFO [default_loader.py:502] Loading weights took 12.01 seconds"
    )
    assert progress.phase == INITIALIZING
    assert progress.feed(
        "INFO [core.py:396] init engine (profile, create kv cache, warmup model) took 30.50 seconds"
    )
    assert progress.phase == STARTING_SERVER
    assert not progress.feed("INFO some unrelated line / with a slash")


def test_sglangs_distributed_init_is_a_phase_of_its_own() -> None:
    """A multi-host group that cannot meet hangs here (SGLang 0.5.23 srt/distributed/bootstrap.py): a
    start-up deadline must name it, not the phase before."""
    progress = StartupProgress(SGLANG.startup_output("0.5.23"))
    assert progress.feed("[2026-11-30 12:00:00 TP0] Init parallel begin.")
    assert progress.phase == DISTRIBUTED_INIT
    progress.feed("[2026-11-30 12:00:09 TP0] Load weight begin. avail mem=94.1 GB")
    assert progress.phase == LOADING_WEIGHTS


def test_fastsafetensors_and_tqdm_default_bar_format() -> None:
    progress = StartupProgress(SGLANG.startup_output("0.5.23"))
    progress.feed("[2026-11-30 12:00:00 TP0] Load weight begin. avail mem=94.1 GB")
    assert progress.phase == LOADING_WEIGHTS
    progress.feed(
        "Loading safetensors using Fastsafetensor loader:  50%|█████     | 32/64 [01:00<01:00,  1.9s/it]"
    )
    assert progress.weight_ratio == 0.5
    fast = StartupProgress(VLLM.startup_output("0.32.0"))
    fast.feed("Loading fastsafetensors checkpoint shards:  25% Completed | 16/64 [00:10<00:30,  1.6it/s]")
    assert fast.weight_ratio == 0.25


def test_data_parallel_ranks_are_summed() -> None:
    """Four local DP ranks each print their own bar: progress is shards loaded over all of them."""
    progress = StartupProgress(VLLM.startup_output("0.32.0"))
    for rank, loaded in enumerate((4, 2, 0, 2)):
        progress.feed(
            f"(EngineCore_DP{rank} pid={100 + rank}) Loading safetensors checkpoint shards: "
            f"{loaded * 25}% Completed | {loaded}/4 [00:01<00:01, 1.00it/s]"
        )
    assert progress.weight_ratio == 0.5 and len(progress.shards) == 4


def test_no_parser_for_services() -> None:
    progress = StartupProgress(None)
    assert not progress.feed(VLLM_LINES[2]) and progress.weight_ratio is None


# ------------------------------------------------------------------ PodHealth answers
@dataclass
class FakeProcess:
    """Our own supervisor's ProcessState fields that PodHealth reads (a unit-test double)."""

    spec: ProcessSpec
    pid: int | None = None
    running: bool = False
    last_exit: int | None = None
    restarts: int = 0
    lifecycle: Lifecycle = Lifecycle.STARTING

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass
class FakeSupervisor:
    processes: list[FakeProcess] = field(default_factory=list)
    stop: StopState = RUNNING

    def process(self, name: str) -> FakeProcess | None:
        return next((p for p in self.processes if p.name == name), None)


ENGINE = Check("engine", "engine", HttpCheck(8000, "/health"))
RENDER = Check("render", "render", HttpCheck(8089, "/health"))
PROBES = Probes(8090, ready=(ENGINE, RENDER), started=ENGINE, progress=VLLM.startup_output("0.32.0"))


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def pod() -> tuple[PodHealth, FakeSupervisor, Clock]:
    clock = Clock()
    health = PodHealth(PROBES, clock=clock)
    supervisor = FakeSupervisor(
        [
            FakeProcess(ProcessSpec("engine", ("vllm",))),
            FakeProcess(ProcessSpec("render", ("render",), critical=False)),
        ]
    )
    return health, supervisor, clock


def test_preflight_is_live_not_started_not_ready() -> None:
    health, _, clock = pod()
    clock.now += 7
    assert health.liveness() == (True, {"live": True, "phase": "preflight"})
    ok, body = health.startup()
    assert not ok and body["phase"] == "preflight" and body["seconds"] == 7
    assert body["waiting_for"] == "engine: engine has not started"
    ok, body = health.readiness()
    assert not ok and body["failing"]["start-up"] == "not started (preflight)"


def test_ready_needs_every_check_of_the_current_process() -> None:
    health, supervisor, clock = pod()
    health.attach(supervisor)
    engine, render = supervisor.processes
    engine.pid, engine.running, render.pid, render.running = 10, True, 11, True
    health.on_line("engine", VLLM_LINES[2])
    assert health.startup()[1]["weights_loaded_ratio"] == pytest.approx(1 / 3, abs=1e-4)
    clock.now += 60
    health.record(ENGINE, CheckResult(True, "GET :8000/health: 200", clock.now, 0.001, pid=10))
    health.record(RENDER, CheckResult(True, "GET :8089/health: 200", clock.now, 0.001, pid=11))
    assert health.readiness()[0] and health.startup() == (
        True,
        {"started": True, "phase": "started", "startup_seconds": 60.0},
    )
    render.pid = 12  # restarted: the old result says nothing about the new process
    ok, body = health.readiness()
    assert not ok and body["failing"] == {"render": "not checked yet"}
    render.running = False
    assert health.readiness()[1]["failing"] == {"render": "render is not running (last exit None)"}
    assert health.liveness()[0]  # a sidecar down is not a dead pod


def test_dead_engine_fails_liveness_before_the_supervisor_reacts() -> None:
    health, supervisor, _ = pod()
    health.attach(supervisor)
    engine = supervisor.processes[0]
    engine.pid, engine.running, engine.last_exit = 10, False, -9  # reaped; the event not handled yet
    assert health.liveness() == (False, {"live": False, "reason": "engine exited (-9)"})
    supervisor.stop = StopRequested(signal.SIGTERM)  # a requested stop the engine finished: no failure
    assert health.liveness()[0]
    supervisor.stop = Failed("engine was killed by SIGKILL", 137)
    assert health.liveness() == (False, {"live": False, "reason": "engine was killed by SIGKILL"})


def test_stopping_is_never_ready() -> None:
    health, supervisor, clock = pod()
    health.attach(supervisor)
    for i, p in enumerate(supervisor.processes):
        p.pid, p.running = 10 + i, True
    health.record(ENGINE, CheckResult(True, "200", clock.now, 0.0, pid=10))
    health.record(RENDER, CheckResult(True, "200", clock.now, 0.0, pid=11))
    assert health.readiness()[0]
    supervisor.stop = StopRequested(signal.SIGTERM)
    assert health.readiness() == (
        False,
        {"ready": False, "phase": "stopping", "failing": {"pod": "shutting down"}},
    )


def test_process_only_check_passes_while_running() -> None:
    probes = Probes(8090, ready=(Check("engine", "engine"),), started=Check("engine", "engine"))
    health = PodHealth(probes)
    supervisor = FakeSupervisor([FakeProcess(ProcessSpec("engine", ("vllm",)), pid=5, running=True)])
    health.attach(supervisor)
    assert health.passing(probes.started) == (True, "engine is running (pid 5)")


def test_build_probes_without_http_falls_back_to_the_process() -> None:
    from launcher.contract.plan import Role, RoleKind
    from roles.probes import build_probes

    probes = build_probes(Role("p", RoleKind.SERVICE), [ProcessSpec("engine", ("x",))], 8090)
    assert probes.ready == (Check("engine", "engine"),) and probes.started == Check("engine", "engine")
