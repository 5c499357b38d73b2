"""Probe rules for the hand-made plans of these tests: every Plan carries some, and these tests run
no probe server, so the simplest rule does (started = the engine process runs)."""

from __future__ import annotations

from launcher.contract.plan import Check, Probes

ENGINE_RUNS = Probes(port=9100, ready=(Check("engine", "engine"),), started=Check("engine", "engine"))
