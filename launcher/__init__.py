"""llm-d-launcher: the ENTRYPOINT of llm-d model-server pods.

Settings (pod env + recipe + CLI) -> Role -> Plan (pure data) -> render (dry-run) or supervise.
"""

__version__ = "0.1.0"
