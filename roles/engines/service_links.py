"""Kubernetes service links that land in an engine's env.

For every Service of its namespace the kubelet gives each container `<NAME>_SERVICE_HOST`,
`<NAME>_SERVICE_PORT` and `<NAME>_PORT=tcp://<cluster IP>:<port>` (NAME: the Service's name upper-cased,
`-` as `_`; kubernetes/kubernetes pkg/kubelet/envvars/envvars.go FromServices), unless the pod sets
`enableServiceLinks: false`. A Service named `vllm` so sets VLLM_PORT, which vLLM reads as the first
of its internal ports and refuses when it "appears to be a URI ... Kubernetes service discovery issue"
(vLLM 0.32.0 vllm/envs.py get_vllm_port); `vllm-nixl-side-channel` would set
VLLM_NIXL_SIDE_CHANNEL_PORT, `sglang` SGLANG_PORT (SGLang 0.5.23 sglang/srt/environ.py EnvInt): the
engine reads a port and finds a URI, at start-up or only when it first needs the port.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from launcher.contract.errors import Problem
from launcher.contract.plan import Plan
from roles.engines import ENGINE_ENV_PREFIXES

_ENGINE_PORT = re.compile(rf"({'|'.join(ENGINE_ENV_PREFIXES)})_[A-Z0-9_]*PORT")
# The value the kubelet writes (envvars.go makeLink: protocol://IP:port, the protocol lower-cased).
_LINK = re.compile(r"(tcp|udp|sctp)://\S+:\d+")


def service_link_problems(plan: Plan, env: Mapping[str, str]) -> list[Problem]:
    """An engine env variable holding a service link: refused before anything starts (`env`: the pod's
    own environment; a process's own env, from the plan, wins over it as at the spawn)."""
    problems: dict[str, Problem] = {}
    for process in plan.processes:
        for name, value in {**env, **process.env}.items():
            if name in problems or not _ENGINE_PORT.fullmatch(name) or not _LINK.fullmatch(value):
                continue
            service = name.removesuffix("_PORT").lower().replace("_", "-")
            problems[name] = Problem(
                name,
                f"is {value!r}, a Kubernetes service link (the Service {service!r} of this namespace), "
                f"not the port number the {process.name} reads",
                "set enableServiceLinks: false in the pod spec (deploy/ does), or rename the Service "
                f"{service!r}",
            )
    return list(problems.values())
