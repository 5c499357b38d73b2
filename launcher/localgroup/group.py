"""The group's namespaces, pods and their teardown (see the package docstring for what a pod gets)."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import select
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from launcher.config.defaults import LOCAL_GROUP_TAG
from launcher.contract import lws
from launcher.supervise.spawn import die_with

NETWORK = ipaddress.IPv4Network("10.77.0.0/24")  # inside the runner's own network namespace only
FIRST_POD_HOST = 10  # pod i gets the network's host number 10 + i; .1 is the bridge
BRIDGE = "llmd-group"
PARKED_SHOWN = 300  # characters of a parked pod's reason in its status line
TAG = LOCAL_GROUP_TAG
LWS_ENV = (*lws.LWS_ENV, *lws.POD_IDENTITY_ENV)  # what the runner, no pod itself, must not carry


@dataclass(frozen=True)
class LocalPod:
    index: int
    name: str  # the pod's name and hostname
    address: str  # its DNS name under the LWS subdomain (a service pod: its Service's name)
    ip: str
    service_pool: str | None = None  # a standalone pod of another pool behind a Service (`--service`)


@dataclass(frozen=True)
class GroupLayout:
    """Names and addresses of one group's pods, as LWS and the kubelet would give them. Pure."""

    lws: str
    size: int
    group: int = 0
    namespace: str = "default"
    network: ipaddress.IPv4Network = NETWORK
    services: tuple[tuple[str, str], ...] = ()  # (pool, Service name): one pod each, beside the group

    @property
    def capacity(self) -> int:
        """Pods the network holds: host numbers from FIRST_POD_HOST up to, not including, broadcast."""
        return self.network.num_addresses - 1 - FIRST_POD_HOST

    @property
    def gateway(self) -> str:
        return str(self.network.network_address + 1)

    @property
    def leader_address(self) -> str:
        return self.pods[0].address

    @property
    def pods(self) -> tuple[LocalPod, ...]:
        pods = []
        for index in range(self.size):
            name = self.pod_name(index)
            ip = str(self.network.network_address + FIRST_POD_HOST + index)
            pods.append(LocalPod(index, name, f"{name}.{self.lws}.{self.namespace}", ip))
        for k, (pool, service) in enumerate(self.services, start=self.size):
            ip = str(self.network.network_address + FIRST_POD_HOST + k)
            pods.append(LocalPod(k, service, f"{service}.{self.namespace}", ip, service_pool=pool))
        return tuple(pods)

    def pod_name(self, index: int) -> str:
        """LWS's: `<lws>-<group>` for the leader, `<lws>-<group>-<index>` for a worker."""
        return f"{self.lws}-{self.group}" + (f"-{index}" if index else "")

    def hosts(self, leader_resolves: bool) -> str:
        """/etc/hosts for every pod; without the leader's entry while its DNS record is not there yet."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        for pod in self.pods:
            if pod.service_pool is not None:  # a Service's cluster DNS names, short and long
                lines.append(f"{pod.ip}\t{pod.name} {pod.address} {pod.address}.svc.cluster.local")
            elif pod.index or leader_resolves:
                lines.append(f"{pod.ip}\t{pod.address} {pod.name}")
        return "\n".join(lines) + "\n"

    def pod_env(self, pod: LocalPod) -> dict[str, str]:
        if pod.service_pool is not None:  # a Deployment's pod: no LWS env
            return {"LLMD_POOL": pod.service_pool, "POD_IP": pod.ip, "POD_NAME": pod.name,
                    "POD_NAMESPACE": self.namespace}  # fmt: skip
        return {
            lws.LEADER_ADDRESS: self.leader_address,
            lws.GROUP_SIZE: str(self.size),
            lws.WORKER_INDEX: str(pod.index),
            "POD_IP": pod.ip,
            "POD_NAME": pod.name,
            "POD_NAMESPACE": self.namespace,
        }


class RunnerError(Exception):
    """The host could not give the group what it needs (no `unshare`, namespaces refused, ...)."""


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if result.returncode != 0:
        raise RunnerError(f"{' '.join(argv)}: {result.stderr.strip() or f'exit {result.returncode}'}")


@dataclass
class RunningPod:
    pod: LocalPod
    holder: subprocess.Popen[bytes]  # keeps the pod's namespaces; gone with it
    log: Path
    termination_log: Path
    proc: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None
    exited_at: float | None = None  # time.time()
    restarts: int = 0  # --restart-policy Always: starts after the first
    last_exit_code: int | None = None  # the start before's, with its termination message: lastState
    last_termination: str = ""
    restart_at: float | None = None  # time.monotonic() of the next start (restartPolicy Always)


@dataclass
class LocalGroup:
    """Brings the group's network up, starts `llm-d-launcher run` in each pod, and takes it all down.
    Whatever it starts gets SIGKILL when the runner dies, even of SIGKILL (a parent-death signal,
    kept across nsenter's and unshare's exec); a launcher's own children die with it in turn."""

    layout: GroupLayout
    workdir: Path
    env: Mapping[str, str]  # every pod's env besides what LWS injects
    probe_port: int
    say: Callable[[str], None] = print
    per_pod_env: Mapping[int, Mapping[str, str]] = field(default_factory=dict)  # pod index -> env over env
    tag: str = field(default_factory=lambda: uuid.uuid4().hex)
    pods: list[RunningPod] = field(default_factory=list)
    restart_always: bool = False  # restartPolicy Always: an ended pod's launcher is started again

    # ------------------------------------------------------------------ network
    def network_up(self, leader_resolves: bool) -> None:
        hosts = self.workdir / "hosts"
        hosts.write_text(self.layout.hosts(leader_resolves))
        _run("mount", "--bind", str(hosts), "/etc/hosts")  # the runner's own mount namespace
        # No DNS server is reachable from the pods: a name not (yet) in /etc/hosts must fail at once,
        # as NXDOMAIN does in a cluster, not after the host's resolver timeouts.
        resolv = self.workdir / "resolv.conf"
        resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        _run("mount", "--bind", str(resolv), "/etc/resolv.conf")
        _run("ip", "link", "set", "lo", "up")
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{self.layout.gateway}/{self.layout.network.prefixlen}", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        for pod in self.layout.pods:
            self.pods.append(self._pod_namespaces(pod))

    def publish_leader(self) -> None:
        """The leader's DNS record appears: rewritten in place, so every bind mount sees it."""
        with open(self.workdir / "hosts", "w", encoding="utf-8") as handle:
            handle.write(self.layout.hosts(leader_resolves=True))

    def _pod_namespaces(self, pod: LocalPod) -> RunningPod:
        holder = subprocess.Popen(
            ["unshare", "--net", "--uts", "--mount", "--propagation", "private", "sh", "-c",
             'mount -t tmpfs -o mode=1777 shm /dev/shm && mount -t sysfs sysfs /sys && hostname "$1" '
             "&& echo ready && exec sleep infinity",
             "pod-namespaces", pod.name],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with(os.getpid()),
        )  # fmt: skip
        assert holder.stdout is not None
        ready, _, _ = select.select([holder.stdout], [], [], 10)
        if not ready or holder.stdout.readline().strip() != b"ready":
            holder.kill()
            raise RunnerError(f"{pod.name}: could not create its namespaces (unshare --net --uts --mount)")
        veth = f"llmd{pod.index}"
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", str(holder.pid))
        _run("ip", "link", "set", veth, "master", BRIDGE, "up")
        inside = ("nsenter", f"--net=/proc/{holder.pid}/ns/net", "ip")
        _run(*inside, "link", "set", "lo", "up")
        _run(*inside, "addr", "add", f"{pod.ip}/{self.layout.network.prefixlen}", "dev", "eth0")
        _run(*inside, "link", "set", "eth0", "up")
        _run(*inside, "route", "add", "default", "via", self.layout.gateway)
        directory = self.workdir / pod.name
        directory.mkdir(parents=True, exist_ok=True)
        return RunningPod(pod, holder, directory / "output.log", directory / "termination-log")

    # ------------------------------------------------------------------ pods
    def start_pods(self, services_ready_within: float = 120.0) -> None:
        """Service pods first (what the group's pods connect to at start), then the group."""
        services = [r for r in self.pods if r.pod.service_pool is not None]
        self._start(services)
        deadline = time.monotonic() + services_ready_within
        while services and time.monotonic() < deadline:
            if all((self._probe(r.pod, "readyz") or {}).get("ready") for r in services):
                break
            if any(r.proc is not None and r.proc.poll() is not None for r in services):
                break
            time.sleep(0.5)
        self._start([r for r in self.pods if r.pod.service_pool is None])
        self._write_manifest()

    def schedule_restart(self, running: RunningPod, now: float) -> float:
        """When the kubelet would start the container again: at once the first time, then after 10 s,
        doubling up to 5 minutes (Kubernetes docs, Pod Lifecycle, "Container restarts"). The delay."""
        delay = 0.0 if running.restarts == 0 else min(10.0 * 2 ** (running.restarts - 1), 300.0)
        running.restart_at = now + delay
        return delay

    def restart(self, running: RunningPod) -> None:
        """The pod's container again, in the same namespaces (its IP, its /dev/shm), as the kubelet
        restarts it; its log goes on, its termination message is kept as the last one."""
        with contextlib.suppress(OSError):
            running.last_termination = running.termination_log.read_text(errors="replace")
            running.termination_log.unlink()
        running.restarts += 1
        running.restart_at = None
        running.last_exit_code, running.exit_code, running.exited_at = running.exit_code, None, None
        self._start([running])
        self._write_manifest()

    def _start(self, pods: list[RunningPod]) -> None:
        for running in pods:
            pod, holder = running.pod, running.holder.pid
            env = {
                **self.env,
                **self.per_pod_env.get(pod.index, {}),
                **self.layout.pod_env(pod),
                TAG: self.tag,
                "LLMD_TERMINATION_LOG": str(running.termination_log),
                "LLMD_RUNTIME_DIR": str(self.workdir / pod.name / "run"),
                "LLMD_SHM_DIR": "/dev/shm",  # the pod's own tmpfs
            }
            with open(running.log, "ab" if running.restarts else "wb") as log:
                running.proc = subprocess.Popen(
                    ["nsenter", f"--net=/proc/{holder}/ns/net", f"--uts=/proc/{holder}/ns/uts",
                     f"--mount=/proc/{holder}/ns/mnt", "--", sys.executable, "-m", "launcher", "run"],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a terminal's Ctrl-C reaches the runner, which forwards it
                    preexec_fn=die_with(os.getpid()),  # its launcher takes its own children along
                )  # fmt: skip

    def _write_manifest(self) -> None:
        pods = [
            {"index": r.pod.index, "name": r.pod.name, "address": r.pod.address, "ip": r.pod.ip,
             "pid": r.proc.pid if r.proc else None, "probe_port": self.probe_port, "log": str(r.log),
             "termination_log": str(r.termination_log), "exit_code": r.exit_code, "exited_at": r.exited_at,
             "restarts": r.restarts, "last_exit_code": r.last_exit_code,
             "last_termination": r.last_termination}
            for r in self.pods
        ]  # fmt: skip
        data = {"leader_address": self.layout.leader_address, "tag": self.tag, "pods": pods}
        # Whole or not at all: readers (tests, a status script) poll it while pods come and go.
        partial = self.workdir / "pods.json.partial"
        partial.write_text(json.dumps(data, indent=2) + "\n")
        partial.replace(self.workdir / "pods.json")

    def reap(self) -> list[RunningPod]:
        """Pods that ended since the last call."""
        ended = []
        for running in self.pods:
            if running.proc is not None and running.exit_code is None:
                code = running.proc.poll()
                if code is not None:
                    running.exit_code = code if code >= 0 else 128 - code
                    running.exited_at = time.time()
                    ended.append(running)
        if ended:
            self._write_manifest()
        return ended

    @property
    def alive(self) -> list[RunningPod]:
        return [r for r in self.pods if r.proc is not None and r.exit_code is None]

    def signal_pods(self, sig: int) -> None:
        for running in self.alive:
            assert running.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(running.proc.pid, sig)

    # ------------------------------------------------------------------ reporting
    def status(self, pod: RunningPod) -> str:
        """One line: the phase (a parked pod's reason with it, as its /startupz says it), weights, ready."""
        if pod.exit_code is not None:
            return f"exited {pod.exit_code}"
        started = self._probe(pod.pod, "startupz")
        ready = self._probe(pod.pod, "readyz")
        if started is None:
            return "probes not answering yet"
        parts = [f"phase {started.get('phase', '?')}"]
        failing = started.get("failing")
        if isinstance(failing, dict) and isinstance(failing.get("parked"), str):  # why, not just that
            parts[0] += f" ({failing['parked'][:PARKED_SHOWN]})"
        ratio = started.get("weights_loaded_ratio")
        if isinstance(ratio, (int, float)):
            parts.append(f"weights {ratio:.0%}")
        if ready is not None and ready.get("ready"):
            parts.append("READY")
        elif ready is not None:
            failing = ready.get("failing")
            parts.append("not ready: " + ", ".join(sorted(failing) if isinstance(failing, dict) else "?"))
        return "; ".join(parts)

    def _probe(self, pod: LocalPod, endpoint: str) -> dict[str, object] | None:
        url = f"http://{pod.ip}:{self.probe_port}/{endpoint}"
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            body = exc.read()
        except (OSError, ValueError):
            return None
        with contextlib.suppress(ValueError):
            answer = json.loads(body)
            if isinstance(answer, dict):
                return answer
        return None

    def obituary(self, pod: RunningPod) -> str:
        message = ""
        with contextlib.suppress(OSError):
            message = pod.termination_log.read_text(errors="replace").strip()
        first = message.splitlines()[0] if message else "(no termination message)"
        return f"{pod.pod.name} exited {pod.exit_code}: {first}"

    # ------------------------------------------------------------------ teardown
    def leftovers(self) -> list[int]:
        """Processes that carry this run's tag after every pod ended: a pod left them behind."""
        import psutil

        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.pid != os.getpid() and proc.environ().get(TAG) == self.tag:
                    found.append(proc.pid)
        return found

    def teardown(self) -> list[int]:
        """Kill whatever a pod left behind (and say so), then the namespace holders."""
        left = self.leftovers()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for running in self.pods:
            with contextlib.suppress(ProcessLookupError):
                running.holder.kill()
            running.holder.wait()
        # A namespace is torn down asynchronously after its last process: delete each veth now (one end
        # takes the other), so a next run can reuse the names at once. Then what is the runner's own.
        veths = [("ip", "link", "del", f"llmd{r.pod.index}") for r in self.pods]
        for argv in (
            *veths,
            ("ip", "link", "del", BRIDGE),
            ("umount", "/etc/hosts"),
            ("umount", "/etc/resolv.conf"),
        ):
            subprocess.run(argv, capture_output=True, timeout=30, check=False)
        return left


def run_group(group: LocalGroup, leader_dns_after: float | None, status_every: float, grace: float) -> int:
    """Run until every pod has ended; SIGINT/SIGTERM stop the group as a deletion would. The exit code is
    the first non-zero pod exit, else 0."""
    stop: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))
    started = time.monotonic()
    published = leader_dns_after == 0
    try:
        group.network_up(leader_resolves=published)
        group.start_pods()
        for running in group.pods:
            group.say(f"pod {running.pod.index} {running.pod.name} ({running.pod.ip}) log: {running.log}")
        group.say(f"LWS_LEADER_ADDRESS={group.layout.leader_address}; pods.json in {group.workdir}")
        first_failure: int | None = None
        next_status = started + status_every
        stop_sent_at: float | None = None
        while group.alive or (not stop and any(r.restart_at is not None for r in group.pods)):
            now = time.monotonic()
            if stop and stop_sent_at is None:
                group.say(f"stopping the group: SIGTERM to every pod (signal {stop[0]})")
                group.signal_pods(signal.SIGTERM)
                stop_sent_at = now
            if stop_sent_at is not None and now - stop_sent_at > grace:
                group.say(f"pods still running {grace:g} s after SIGTERM: SIGKILL")
                group.signal_pods(signal.SIGKILL)
                stop_sent_at = float("inf")
            if not published and leader_dns_after is not None and now - started >= leader_dns_after:
                group.publish_leader()
                published = True
                group.say(f"[{now - started:5.0f}s] DNS: {group.layout.leader_address} now resolves")
            for running in group.reap():
                group.say(f"[{now - started:5.0f}s] {group.obituary(running)}")
                if running.exit_code and first_failure is None:
                    first_failure = running.exit_code
                if group.restart_always and not stop:
                    delay = group.schedule_restart(running, now)
                    group.say(f"[{now - started:5.0f}s] {running.pod.name} starts again in {delay:g} s")
            for running in group.pods:
                if running.restart_at is not None and now >= running.restart_at and not stop:
                    group.restart(running)
            if now >= next_status and group.alive:
                for running in group.pods:
                    group.say(f"[{now - started:5.0f}s] pod {running.pod.index}: {group.status(running)}")
                next_status = now + status_every
            time.sleep(0.1)
        return first_failure or 0
    finally:
        group.signal_pods(signal.SIGKILL)
        for running in group.pods:
            if running.proc is not None:
                running.proc.wait()
        left = group.teardown()
        if left:
            group.say(f"killed {len(left)} process(es) the pods left behind: {left}")
