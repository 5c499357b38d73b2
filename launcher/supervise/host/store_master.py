"""Is the KV store's master a store client will register with there? Its RPC port must accept a
connection and its HTTP metadata server (Mooncake's is embedded in the master with
--enable_http_metadata_server) must answer. A client started without it retries on its own (a
donor's /health even says `master_unreachable`), but nothing says which address is wrong or what to
do."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

from launcher.contract.plan import StoreMaster


def master_problem(master: StoreMaster, timeout: float) -> str | None:
    """What is wrong with the master right now; None: both of its services answer."""
    host, _, port = master.rpc.rpartition(":")
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except (OSError, ValueError) as exc:
        return f"its RPC {master.rpc} does not accept a connection ({getattr(exc, 'strerror', None) or exc})"
    if master.metadata_server is None:
        return None
    try:
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # in-cluster: no proxy
        with direct.open(f"{master.metadata_server}?key=llm-d-launcher%2Fpreflight", timeout=timeout):
            return None
    except urllib.error.HTTPError:  # any HTTP answer (404 "metadata not found") means it serves
        return None
    except (OSError, ValueError) as exc:
        return f"its metadata server {master.metadata_server} does not answer ({getattr(exc, 'reason', exc)})"
