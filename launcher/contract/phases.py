"""The start-up phases a pod goes through, in order: the launcher's own, and those an engine's output
announces (the plan's `StartupOutput` maps output lines to them). Metrics list every one."""

from __future__ import annotations

PREFLIGHT = "preflight"
PARKED = "parked"  # in an LWS group, on a mistake a restart cannot fix (launcher/parking.py)
WAITING_FOR_LEADER = "waiting for leader"
STARTING = "starting processes"
# joining the engine's process groups across the pods (torch.distributed, the TP broadcast queues): a
# multi-host group waits here for its slowest host, and hangs here when its pods cannot meet
DISTRIBUTED_INIT = "initializing distributed"
LOADING_WEIGHTS = "loading weights"
INITIALIZING = "initializing engine"  # profiling memory, allocating the KV cache, compiling
CAPTURING_GRAPHS = "capturing graphs"
STARTING_SERVER = "starting API server"
STARTED = "started"
STOPPING = "stopping"
PHASES = (
    PREFLIGHT, PARKED, WAITING_FOR_LEADER, STARTING, DISTRIBUTED_INIT, LOADING_WEIGHTS, INITIALIZING,
    CAPTURING_GRAPHS, STARTING_SERVER, STARTED, STOPPING,
)  # fmt: skip
