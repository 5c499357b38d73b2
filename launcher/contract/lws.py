"""The environment a LeaderWorkerSet injects into each pod of a group, and the pod identity the
manifests give from the downward API: declared once here, read by the settings, the parking rules
and `local-group` (which plays LWS). kubernetes-sigs/lws, docs/reference/labels-annotations-and-
environment-variables (LWS_WORKER_INDEX since kubernetes-sigs/lws#416)."""

LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
GROUP_SIZE = "LWS_GROUP_SIZE"
WORKER_INDEX = "LWS_WORKER_INDEX"
LWS_ENV = (LEADER_ADDRESS, GROUP_SIZE, WORKER_INDEX)  # LWS injects all three
POD_IDENTITY_ENV = ("POD_IP", "POD_NAME", "POD_NAMESPACE")  # fieldRef status.podIP, metadata.name, .namespace
