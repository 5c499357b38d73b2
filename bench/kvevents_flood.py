"""KV-event flood benchmark: what a publisher sending as fast as pyzmq can does to the launcher that
subscribes to it: its peak RSS and how fast /livez answers meanwhile (results:
bench/results/kvevents_flood.md).

- publisher: the STAND-IN engine's KV-event publisher (tests/standins/vllm, `flood=S`): vLLM's wire
  format and send high-water mark (100,000), batches of FLOOD_EVENTS BlockStored events, sent in a
  tight loop for --seconds
- launcher: `llm-d-launcher run` as a pod runs it (tests/pods.py), watching that rank
- RSS: the launcher process's resident set, sampled every SAMPLE seconds; a run past ABORT_RSS is
  stopped there (the machine is shared), its peak then reads "≥ ABORT_RSS"
- probes: GET /livez on a new connection each time (as the kubelet does) back to back, with a
  generous client timeout so a slow answer is measured, not cut; a probe slower than the kubelet's
  default timeoutSeconds (1 s) is a missed probe
- accounting: after the flood the publisher sends a batch every 0.5 s, so a batch dropped at the
  flood's end is revealed by the next one; once the launcher has read the publisher's backlog and is
  past the flood, every batch up to the latest is received or counted missing (a gap: recovered by
  replay or lost), from /kvevents

    .venv/bin/python bench/kvevents_flood.py [--seconds 20] [--json OUT.json] [--before BEFORE.json]

--json saves this run's measures; --before adds an earlier run's (another checkout's) as a column.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from healthchecks.kvevents.bounds import RECEIVE_QUEUE, SLICE  # noqa: E402
from tests.pods import LauncherPod  # noqa: E402
from tests.supervisor.test_kv_events import kv_pod  # noqa: E402

IDLE = 3.0  # seconds of probes before the flood: the machine's own probe latency
SAMPLE = 0.05  # seconds between RSS samples
ABORT_RSS = 2 * 2**30  # bytes: a run that grows past this is stopped
RSS_GOAL = 256 * 2**20  # bytes: the launcher's peak under the flood
PROBE_DEADLINE = 1.0  # seconds: the kubelet's default timeoutSeconds
DRAIN_TIMEOUT = 180.0  # seconds for the launcher to read what the publisher queued during the flood
PROBE_TIMEOUT = 30.0  # seconds: the client's, so a slow answer is measured
MiB = 2**20
NOTES = f"""
- "before" is the same script run on the watcher without bounds (an unbounded SUB queue, decoding
  1,000 messages per event-loop turn, a replay request per gap), from a checkout of that commit.
- Bounded (healthchecks/kvevents/bounds.py): the launcher's SUB socket queues {RECEIVE_QUEUE} messages;
  the rest waits in the publisher's own queue (vLLM's hwm, 100,000), which drops what overflows.
  Those batches are gaps: missed, then lost (or recovered, when the replay buffer still has them).
  Their sum with the received ones is every batch sent: no silent drop. A message's size is not
  bounded (bounds.py says why), so a publisher of huge messages still costs {RECEIVE_QUEUE} of them.
- Probes: decoding runs {1000 * SLICE:g} ms at a time, then the event loop serves everything else,
  so a probe waits a few slices. The launcher still spends what CPU it gets on the flood (the
  machine's 2 cores were shared with other work: load average in the first row).
"""


def probe_loop(pod: LauncherPod, stop: threading.Event, latencies: list[float]) -> None:
    """Back-to-back /livez probes, each on a new connection with the stdlib's plain HTTP client (the
    least client-side cost); a probe that fails counts as PROBE_TIMEOUT."""
    while not stop.is_set():
        began = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", pod.probe_port, timeout=PROBE_TIMEOUT)
        try:
            conn.request("GET", "/livez")
            conn.getresponse().read()
            latencies.append(time.perf_counter() - began)
        except OSError:
            latencies.append(PROBE_TIMEOUT)
        finally:
            conn.close()
        time.sleep(0.02)


def flood(seconds: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        pod = kv_pod(Path(tmp), f"wait={IDLE + 2:g},flood={seconds:g},tail={DRAIN_TIMEOUT:g}").start()
        try:
            pod.wait_probe("livez", 200)
            launcher = psutil.Process(pod.pid)
            stop, idle = threading.Event(), list[float]()
            prober = threading.Thread(target=probe_loop, args=(pod, stop, idle))
            prober.start()
            time.sleep(IDLE)
            stop.set()
            prober.join()
            pod.wait_for(f"stand-in kv rank 0: wait={IDLE + 2:g} done", timeout=30)
            stop, latencies = threading.Event(), list[float]()
            prober = threading.Thread(target=probe_loop, args=(pod, stop, latencies))
            prober.start()
            began, peak, cpu0 = time.monotonic(), 0, launcher.cpu_times()
            aborted = False
            while "flood=" not in pod.output():
                peak = max(peak, launcher.memory_info().rss)
                if peak > ABORT_RSS:
                    aborted = True
                    break
                time.sleep(SAMPLE)
            flooded = time.monotonic() - began
            cpu1 = launcher.cpu_times()
            stop.set()
            prober.join()
            flood_end = re.search(r"flood=\S+ done \(next seq (\d+)\)", pod.output())
            last = int(flood_end.group(1)) - 1 if flood_end else 0
            rank, began = {}, time.monotonic()
            while not aborted and time.monotonic() - began < DRAIN_TIMEOUT:
                rank = counts(
                    pod
                )  # past the flood's last batch, replays settled: each one received or missed
                settled = rank.get("missed") == rank.get("recovered", 0) + rank.get("lost", 0)
                if (rank.get("last_seq") or 0) > last and settled:
                    break
                time.sleep(1)
            drained = time.monotonic() - began
            return {
                "load": os.getloadavg(),
                "seconds": round(flooded, 1),
                "aborted": aborted,
                "peak_rss": peak,
                "rss_after": launcher.memory_info().rss,
                "cpu": (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / flooded,
                "idle_probes": idle,
                "probes": latencies,
                "sent": None if rank.get("last_seq") is None else rank["last_seq"] + 1,
                "drained": drained,
                "rank": {k: rank.get(k) for k in ("batches", "missed", "recovered", "lost")},
            }
        finally:
            pod.kill_everything()


def counts(pod: LauncherPod) -> dict[str, Any]:
    """Rank 0's counts from /kvevents; none when the launcher does not answer within PROBE_TIMEOUT."""
    try:
        reply = httpx.get(f"http://127.0.0.1:{pod.probe_port}/kvevents", timeout=PROBE_TIMEOUT)
    except httpx.HTTPError:
        return {}
    ranks: dict[str, Any] = reply.json()["ranks"]
    return ranks["0"]  # type: ignore[no-any-return]


def percentiles(latencies: list[float]) -> str:
    lat = sorted(latencies)
    p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
    return " / ".join(f"{1000 * x:,.0f}" for x in (statistics.median(lat), p99, lat[-1])) + " ms"


def column(run: dict[str, Any]) -> dict[str, str]:
    lat = run["probes"]
    late = sum(1 for x in lat if x > PROBE_DEADLINE)
    rank = run["rank"]
    peak = (
        f"≥ {ABORT_RSS / MiB:,.0f} MiB (stopped)" if run["aborted"] else f"{run['peak_rss'] / MiB:,.0f} MiB"
    )
    return {
        "flood": f"{run['seconds']} s, load average {run['load'][0]:.1f}",
        "peak RSS": peak,
        "RSS after": f"{run['rss_after'] / MiB:,.0f} MiB",
        "launcher CPU": f"{100 * run['cpu']:.0f} % of a core",
        "/livez p50 / p99 / max, no flood": percentiles(run.get("idle_probes") or [0.0]),
        "/livez p50 / p99 / max, flooded": percentiles(lat),
        "/livez over 1 s": f"{late} of {len(lat)}",
        "batches sent (up to the latest received, past the flood)": f"{run['sent']:,}"
        if run["sent"]
        else "-",
        "received / missed / recovered / lost": " / ".join(
            "-" if rank[k] is None else f"{rank[k]:,}" for k in ("batches", "missed", "recovered", "lost")
        ),
        "sent, neither received nor counted missing": "-"
        if rank["batches"] is None
        else f"{run['sent'] - (rank['batches'] - rank['recovered'] + rank['missed']):,}",
        "backlog read (after the flood)": "-" if run["aborted"] else f"{run['drained']:.0f} s",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the publisher floods")
    parser.add_argument("--json", type=Path, help="save this run's measures there")
    parser.add_argument("--before", type=Path, help="an earlier run's --json, shown as a column")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "kvevents_flood.md")
    ns = parser.parse_args()
    run = flood(ns.seconds)
    if ns.json:
        ns.json.write_text(json.dumps(run))
    runs = {"before": json.loads(ns.before.read_text())} if ns.before else {}
    runs["this checkout"] = run
    columns = {name: column(r) for name, r in runs.items()}
    now = columns["this checkout"]
    peak_met = not run["aborted"] and run["peak_rss"] <= RSS_GOAL
    late = sum(1 for x in run["probes"] if x > PROBE_DEADLINE)
    goals = {
        "peak RSS": f"≤ {RSS_GOAL / MiB:.0f} MiB: {'met' if peak_met else 'NOT MET'}",
        "/livez over 1 s": f"0: {'met' if late == 0 else 'NOT MET'}",
        "sent, neither received nor counted missing": "0: "
        + (
            "met"
            if columns["this checkout"]["sent, neither received nor counted missing"] == "0"
            else "NOT MET"
        ),
    }
    lines = [
        f"# KV-event flood benchmark ({time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()})",
        "",
        "The STAND-IN publisher (vLLM's wire format and send high-water mark) floods one rank for "
        f"{ns.seconds:g} s while /livez is probed back to back (`python bench/kvevents_flood.py`).",
        "",
        "| measure | " + " | ".join(runs) + " | goal |",
        "|---|" + "---|" * len(runs) + "---|",
        *(
            f"| {measure} | "
            + " | ".join(c[measure] for c in columns.values())
            + f" | {goals.get(measure, '')} |"
            for measure in now
        ),
    ]
    lines += ["", "Notes:", *NOTES.strip("\n").splitlines()]
    text = "\n".join(lines) + "\n"
    print(text)
    ns.out.write_text(text)
    print(f"written to {ns.out}")


if __name__ == "__main__":
    main()
