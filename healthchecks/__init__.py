"""The launcher's probes: /livez /readyz /startupz /metrics per role, answered from cached state.

- progress.py  start-up phase and weight-loading progress, from the engine's output and the plan (pure)
- state.py     PodHealth: check results + the supervisor's process table -> probe answers
- watcher.py   the watcher protocol (run -> Verdict, /livez, readiness answers, details, metrics)
- pod_watchers.py  the one factory: the pod's watchers, built from the final plan
- http.py      the one HTTP GET helper: every failure a one-line reason
- engine_metrics.py  the one reader of an engine's /metrics (token counters, served requests)
- checks.py    background checks (engine /health, sidecars, leader reachable), each with a timeout
- metrics.py   Prometheus exposition, llmd_launcher_* names
- server.py    the probe server: the probe port's sockets, its aiohttp application (the launcher's loop)
- probe_process.py    the probe process: answers the three probes from the published answers, relays the rest
- probe_publisher.py  the launcher's side of it: starts it, publishes PodHealth's answers on change
- probe.py     `llm-d-launcher probe live|ready|startup`, for exec probes
- kvevents/    the KV-event watcher: wire format, sequence tracking, watcher, its metrics, IPv6 relay
- deadline.py  the start-up deadline (LLMD_STARTUP_SECONDS)
- forward.py   forward progress: token counters, a one-token canary when idle, the stall verdict
- canary.py    the canary request and how its answer is judged (forward progress, the P/D canary)
- pd_canary.py the P/D canary through the disagg sidecar: an Observer, never a verdict
- kv_transfer.py  the connector's KV-transfer counters, relayed from the forward watch's reads
- peers.py     the LWS group's other launchers: one lost ends this pod
- hydration.py     is the checkpoint still being copied in? (the start-up deadline waits for it)
- store_master.py  the KV store's master: has it restarted and forgotten this pod's registration?
"""
