"""The PID-1 runtime: preflight, the supervisor, child output, how the pod ended."""
