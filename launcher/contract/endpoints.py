"""The probe endpoints, declared once: their paths, the boolean field each answer carries and the
PodHealth method that answers it. The probe server routes them, the exec probe asks them, and the
probe process (which imports nothing of ours) gets paths and fields in every snapshot it is sent."""

from dataclasses import dataclass


@dataclass(frozen=True)
class ProbeEndpoint:
    path: str
    key: str  # the answer's boolean field: {"live": false, ...}
    answer: str  # the healthchecks.state.PodHealth method that answers it
    liveness: bool = False  # the kubelet restarts the container when it fails: its silence says only why


PROBE_ENDPOINTS = {  # the exec probe's word -> the endpoint
    "live": ProbeEndpoint("/livez", "live", "liveness", liveness=True),
    "ready": ProbeEndpoint("/readyz", "ready", "readiness"),
    "startup": ProbeEndpoint("/startupz", "started", "startup"),
}
