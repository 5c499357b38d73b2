"""Address helpers shared by settings validation and the plan builders."""

from __future__ import annotations

import ipaddress
import re

DNS_NAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)


def is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def host_port(host: str, port: int) -> str:
    """host:port with IPv6 literals bracketed (RFC 3986 §3.2.2; llm-d's TPU guides run IPv6 pod IPs)."""
    return f"[{host}]:{port}" if is_ip(host) and ":" in host else f"{host}:{port}"


def is_host_port(value: str) -> bool:
    """host:port as an HTTP header carries one: a DNS name or IPv4 address, or an IPv6 literal in
    brackets, and a port 1-65535."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return False
    if host.startswith("[") and host.endswith("]"):
        return ":" in host and is_ip(host[1:-1])
    return ":" not in host and (is_ip(host) or DNS_NAME.match(host) is not None)
