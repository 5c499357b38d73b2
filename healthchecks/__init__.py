"""Probe endpoints (/livez, /readyz, /startupz, /metrics) — built with the probes issue (#4).

The plan already says how each process is checked (ProcessSpec.health); the server reads that.
"""
