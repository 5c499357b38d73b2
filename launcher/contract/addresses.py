"""Address helpers shared by settings validation and the plan builders."""

from __future__ import annotations

import ipaddress
import re

# Matched whole (is_dns_name): `$` and re.match would let a trailing newline through ("pf\n"), which
# aiohttp then refuses as a header value.
DNS_NAME = re.compile(
    r"(?=.{1,253}\Z)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?"
)


def is_dns_name(value: str) -> bool:
    return DNS_NAME.fullmatch(value) is not None


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
    if not sep or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        return False
    if host.startswith("[") and host.endswith("]"):
        return ":" in host and is_ip(host[1:-1]) and "%" not in host  # no zone: not in a Host header
    return ":" not in host and (is_ip(host) or is_dns_name(host))
