"""The environment a LeaderWorkerSet injects into each pod of a group, and the pod identity the
manifests give from the downward API: declared once here, read by the settings, the parking rules
and `local-group` (which plays LWS). kubernetes-sigs/lws, docs/reference/labels-annotations-and-
environment-variables (LWS_WORKER_INDEX since kubernetes-sigs/lws#416)."""

from __future__ import annotations

from collections.abc import Mapping

LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
GROUP_SIZE = "LWS_GROUP_SIZE"
WORKER_INDEX = "LWS_WORKER_INDEX"
LWS_ENV = (LEADER_ADDRESS, GROUP_SIZE, WORKER_INDEX)  # LWS injects all three
POD_IDENTITY_ENV = ("POD_IP", "POD_NAME", "POD_NAMESPACE")  # fieldRef status.podIP, metadata.name, .namespace
# Not injected by LWS: the manifests give it from the downward API (the pod's label
# leaderworkerset.sigs.k8s.io/name); the pod's Kubernetes Event is recorded on the LWS it names.
LWS_NAME = "LWS_NAME"


def in_group(environ: Mapping[str, str]) -> bool:
    """The pod runs in a LeaderWorkerSet group: a restart would recreate the group."""
    return any(name in environ for name in LWS_ENV)
