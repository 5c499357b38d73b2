"""Which interface holds POD_IP, and does the route to the leader leave through it? gloo and NCCL pick
an interface themselves and, with eth0 plus 8 RDMA NICs (GKE DRANET on GB300), pick wrong
(aws-samples/aws-do-eks #50/#51, vLLM #7074, SGLang #3226)."""

from __future__ import annotations

import ipaddress
import socket

from launcher.contract.errors import Problem
from launcher.contract.plan import IFNAME_PLACEHOLDER, HostNeeds, Plan


def interfaces() -> dict[str, list[str]]:
    """Interface -> its IP addresses (IPv6 zone ids dropped)."""
    import psutil

    out: dict[str, list[str]] = {}
    for name, addrs in psutil.net_if_addrs().items():
        for addr in addrs:
            if addr.family in (socket.AF_INET, socket.AF_INET6):
                out.setdefault(name, []).append(addr.address.split("%", 1)[0])
    return out


def interface_of(ip: str, table: dict[str, list[str]]) -> str | None:
    wanted = ipaddress.ip_address(ip)
    for name, addrs in table.items():
        if any(ipaddress.ip_address(a) == wanted for a in addrs):
            return name
    return None


def interface_unusable(ifname: str) -> str | None:
    """Why the interface cannot carry traffic now: administratively down, or up without a carrier
    (its flags as the kernel reports them, SIOCGIFFLAGS through psutil); None when it can."""
    import psutil

    stats = psutil.net_if_stats().get(ifname)
    if stats is None:
        return None
    flags = stats.flags or "none"
    if "up" not in flags.split(","):
        return f"is down (flags: {flags})"
    if "running" not in flags.split(","):
        return f"is up but has no carrier (flags: {flags}; a veth whose peer is down, a cable unplugged)"
    return None


def route_source(dest: str) -> str | None:
    """The source address the kernel picks to reach dest (a UDP connect sends nothing)."""
    family = socket.AF_INET6 if ":" in dest else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((dest, 9))
            return str(sock.getsockname()[0]).split("%", 1)[0]
    except OSError:
        return None


def fix_for(needs: HostNeeds) -> str:
    also = f" and {needs.host_ip_var}" if needs.host_ip_var else ""
    return (
        f"give the container POD_IP from fieldRef status.podIP, or set {', '.join(needs.ifname_vars)}{also} "
        "in the recipe env"
    )


def check_network(plan: Plan) -> tuple[str | None, list[Problem]]:
    env = plan.engine.env
    host_ip_var = plan.needs.host_ip_var
    ip = env.get(host_ip_var) if host_ip_var else None
    fix = fix_for(plan.needs)
    table = interfaces()
    shown = "; ".join(f"{n} {' '.join(a)}" for n, a in table.items())[:300]
    problems = []
    for var in plan.needs.ifname_vars:
        value = env.get(var, IFNAME_PLACEHOLDER)
        # NCCL takes prefixes and ^exclusions; only a plain single name can be checked here.
        if value != IFNAME_PLACEHOLDER and value.isidentifier() and value not in table:
            problems.append(
                Problem(var, f"names interface {value}, which this pod does not have ({shown})", fix)
            )
    try:
        ipaddress.ip_address(ip or "")
    except ValueError:
        return None, problems  # no IP to locate (a placeholder left would have been refused earlier)
    assert ip is not None
    ifname = interface_of(ip, table)
    if ifname is None:
        problems.append(Problem("POD_IP", f"{ip} is on none of this pod's interfaces ({shown})", fix))
        return None, problems
    if ipaddress.ip_address(ip).is_link_local and ":" in ip:
        why = "an IPv6 link-local address: it needs a zone and no router forwards it"
        problems.append(Problem("POD_IP", f"{ip} on {ifname} is {why}", fix))
        return None, problems
    if (unusable := interface_unusable(ifname)) is not None:
        problems.append(Problem("POD_IP", f"{ip} is on {ifname}, which {unusable}", fix))
        return None, problems
    leader = plan.role.leader_address
    if leader and plan.role.group_size > 1 and plan.role.worker_index != 0:
        try:
            ipaddress.ip_address(leader)
        except ValueError:
            return ifname, problems
        source = route_source(leader)
        via = interface_of(source, table) if source else None
        if via is None:
            problems.append(Problem("LWS_LEADER_ADDRESS", f"no route to the leader {leader}", fix))
        elif via != ifname and via != "lo":
            problems.append(
                Problem(
                    "LWS_LEADER_ADDRESS",
                    f"the route to the leader {leader} leaves through {via} ({source}), but POD_IP {ip} is "
                    f"on "
                    f"{ifname}: gloo and NCCL would bind one interface and be reached on another",
                    "fix the pod's routes (the leader's pod IP must be reachable through the POD_IP "
                    f"interface), or set {'/'.join(plan.needs.ifname_vars)} in the recipe env",
                )
            )
    return ifname, problems
