"""Defaults that are read before, or without, the settings stack: plain constants, standard library only.

`launcher.config.settings` declares each setting once and takes these as its defaults; the exec
probe (`healthchecks/probe.py`, forked by the kubelet every period) and `run`'s first lines (the
termination log, before the settings are validated) read them without importing pydantic.
"""

from __future__ import annotations

PROBE_PORT = 8090  # the launcher's probe server; no port of the guide's pods
CATALOG_DIR = "/opt/llm-d-launcher/catalogs"  # where the images write `catalog build`'s output
TERMINATION_LOG = "/dev/termination-log"  # the kubelet's default terminationMessagePath
LOCAL_GROUP_TAG = "LLMD_LOCAL_GROUP"  # in every `local-group` pod's env: finds whatever a pod left behind
