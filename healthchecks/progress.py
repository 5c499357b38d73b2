"""Start-up progress read from the engine's own output: which phase it is in and how many weight
shards are loaded. A 45-minute load should say what it is doing; the engine only says it in its logs.

The patterns are data, one table per engine family (the plan's `Probes.progress` names the table).
Each was read from the engine's source (vLLM 0.32 `model_loader/weight_utils.py`, `default_loader.py`,
`v1/engine/core.py`, `launchers/api_server/entry.py`; SGLang 0.5.23 `model_runner.py`,
`cuda_graph_setup.py`; fastsafetensors `parallel_loader.py`), and matches anywhere in a line so that
vLLM's `(EngineCore_DP0 pid=…)` prefixes and log formats do not matter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Phases in the order a pod goes through them; metrics list every one.
PREFLIGHT = "preflight"
WAITING_FOR_LEADER = "waiting for leader"
STARTING = "starting processes"
LOADING_WEIGHTS = "loading weights"
INITIALIZING = "initializing engine"  # profiling memory, allocating the KV cache, compiling
CAPTURING_GRAPHS = "capturing graphs"
STARTING_SERVER = "starting API server"
STARTED = "started"
STOPPING = "stopping"
PHASES = (
    PREFLIGHT, WAITING_FOR_LEADER, STARTING, LOADING_WEIGHTS, INITIALIZING, CAPTURING_GRAPHS,
    STARTING_SERVER, STARTED, STOPPING,
)  # fmt: skip

PHASE_PATTERNS: dict[str, tuple[tuple[str, str], ...]] = {
    "vllm": (
        ("Starting to load model", LOADING_WEIGHTS),
        ("Loading weights took", INITIALIZING),
        ("Model loading took", INITIALIZING),
        ("Capturing CUDA graphs", CAPTURING_GRAPHS),
        ("init engine (profile, create kv cache, warmup model) took", STARTING_SERVER),
        ("Starting vLLM server on", STARTING_SERVER),
    ),
    "sglang": (
        ("Load weight begin", LOADING_WEIGHTS),
        ("Load weight end", INITIALIZING),
        ("CUDA graph begin", CAPTURING_GRAPHS),
    ),
}

# tqdm bars of every weight loader of both engines: "<desc>: 42% Completed | 5/12 [" (vLLM's format)
# or "<desc>:  42%|████      | 5/12 [" (tqdm's default, SGLang's fastsafetensors path).
_SHARDS = re.compile(r"(?P<desc>Loading [^:|]{1,80}):\s+\d{1,3}%.*?\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\[")
_SOURCE = re.compile(r"^\((?P<source>[^)]{1,80})\)")  # vLLM: (EngineCore_DP0 pid=12) for each rank


@dataclass
class ShardProgress:
    desc: str
    loaded: int
    total: int


@dataclass
class StartupProgress:
    """Fed the engine's output lines until start-up ends."""

    family: str | None
    phase: str | None = None  # the latest phase the engine's output named
    shards: dict[str, ShardProgress] = field(default_factory=dict)  # by the rank that printed the bar

    def feed(self, line: str) -> bool:
        """True when the line changed what is known."""
        if self.family is None:
            return False
        if "Loading " in line and "/" in line and (bar := _SHARDS.search(line)):
            source = m.group("source") if (m := _SOURCE.match(line)) else ""
            self.shards[source] = ShardProgress(
                bar.group("desc"), int(bar.group("n")), int(bar.group("total"))
            )
            self.phase = LOADING_WEIGHTS
            return True
        for text, phase in PHASE_PATTERNS.get(self.family, ()):
            if text in line:
                self.phase = phase
                return True
        return False

    @property
    def weight_ratio(self) -> float | None:
        """Shards loaded over shards to load, summed over every rank that reports a bar."""
        total = sum(s.total for s in self.shards.values())
        if not total:
            return None
        return min(1.0, sum(s.loaded for s in self.shards.values()) / total)

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if (ratio := self.weight_ratio) is not None:
            out["weights_loaded_ratio"] = round(ratio, 4)
            out["shards"] = [
                {"rank": source or None, "what": s.desc, "loaded": s.loaded, "total": s.total}
                for source, s in self.shards.items()
            ]
        return out
