"""The contract every layer shares: the plan (frozen data), input errors, redaction, addresses, the
log protocol, the stop state and the exit-code table.

It imports nothing of ours, so any layer may import it and none of it can reach a process, a socket
or a clock (import-linter, pyproject.toml)."""
