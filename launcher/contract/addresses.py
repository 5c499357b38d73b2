"""Address helpers shared by settings validation and the plan builders."""

from __future__ import annotations

import ipaddress


def is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def host_port(host: str, port: int) -> str:
    """host:port with IPv6 literals bracketed (RFC 3986 §3.2.2; llm-d's TPU guides run IPv6 pod IPs)."""
    return f"[{host}]:{port}" if is_ip(host) and ":" in host else f"{host}:{port}"
