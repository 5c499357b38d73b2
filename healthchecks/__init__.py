"""The launcher's probes: /livez /readyz /startupz /metrics per role, answered from cached state.

- progress.py  start-up phase and weight-loading progress, from the engine's output and the plan (pure)
- state.py     PodHealth: check results + the supervisor's process table -> probe answers
- checks.py    background checks (engine /health, sidecars, leader reachable), each with a timeout
- metrics.py   Prometheus exposition, llmd_launcher_* names
- server.py    the aiohttp probe server in the launcher's event loop
- probe.py     `llm-d-launcher probe live|ready|startup`, for exec probes
- kvevents/    the KV-event watcher: wire format, sequence tracking, watcher, IPv6 relay
- forward.py   forward progress: token counters, a one-token canary when idle, the stall verdict
- peers.py     the LWS group's other launchers: one lost ends this pod
"""
