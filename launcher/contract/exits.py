"""The exit-code table: every code `run` can end with, what it means, and how the termination message
words it. `run --help`, the termination messages of the codes the launcher chooses and
docs/reference/exit-codes.md are generated from it (scripts/generate_docs.py).

Standard library only: `--help` reads it, and the exec probe imports the CLI module."""

from __future__ import annotations

import signal

from launcher.contract.record import record


@record
class ExitCode:
    """One row of the table. `reason` is how the termination message begins, with `{field}`s the
    caller fills in (`says`); rows whose code comes from elsewhere (the engine, a signal) have none."""

    code: str  # as a person reads it: "3", "128+N", "the engine's own"
    name: str
    meaning: str
    reason: str = ""
    # Under LWS (RecreateGroupOnPodRestart, its default) every exit of a container recreates the whole
    # group: what a pod of a group does instead, when a fresh group cannot help, and whether it can.
    in_group: str = "exits: LWS recreates the group"
    fresh_group_fixes: str = "yes"

    @property
    def number(self) -> int:
        """The code itself, for the rows the launcher chooses."""
        return int(self.code)

    def says(self, **fields: object) -> str:
        """The termination message's first words for this code."""
        return self.reason.format(**fields)


OK = ExitCode(
    "0",
    "ok",
    "a requested stop (SIGTERM/SIGINT) completed in time",
    in_group="exits (the pod is being deleted)",
    fresh_group_fixes="nothing to fix",
)
ENGINE_OWN = ExitCode(
    "the engine's own",
    "engine-exit",
    "the engine exited by itself with that code",
    in_group="exits: LWS recreates the group; but an engine that refused its configuration before "
    "loading weights (its last output an argparse error, a ValidationError or ValueError of its config "
    "checks) parks the pod with that line instead; exits 2 after LLMD_PARK_SECONDS or on SIGTERM",
    fresh_group_fixes="yes, a crash; not an engine that refuses its flags (it would again: it parks)",
)
SIGNALLED = ExitCode(
    "128+N",
    "signalled",
    "signal N killed the engine (137 SIGKILL, 139 SIGSEGV), or a process had to be SIGKILLed while stopping",
    fresh_group_fixes="yes; an OOM kill (137) only if the memory limit is raised",
)
INTERNAL_ERROR = ExitCode(
    "1",
    "internal-error",
    "an internal error of the launcher, or a sidecar that crash-looped with exit code 0",
    "llm-d-launcher internal error: {error}",
    fresh_group_fixes="only a transient one; a launcher bug repeats",
)
BAD_INPUT = ExitCode(
    "2",
    "bad-input",
    "bad input or a failed preflight: one line per problem, nothing spawned",
    in_group="parks: /livez 200, /startupz and /readyz 503 with the reason; re-checks and starts in "
    "the same pod once fixed; exits 2 after LLMD_PARK_SECONDS or on SIGTERM",
    fresh_group_fixes="no: a fixed recipe file (a ConfigMap mounted without a hash suffix), a finished "
    "checkpoint copy or a freed port heals the parked pod in place; the container's env, capabilities, "
    "memlock, devices and image only a rollout (a recipe ConfigMap with a hash suffix rolls the group)",
)
ENGINE_QUIT = ExitCode(
    "3",
    "engine-quit",
    "the engine exited 0 although no stop was asked for (a DP supervisor does after a rank died): "
    "a crash, not a success",
    "{process} exited with code 0 although no stop was asked for",
    fresh_group_fixes="yes: a rank died and the group starts over",
)
GROUP_BROKEN = ExitCode(
    "4",
    "group-broken",
    "another pod of the LWS group is gone: its launcher answered /livez once and then not for "
    "LLMD_PEER_LOST_SECONDS",
    "group member {peer} is gone: {detail}",
    fresh_group_fixes="yes: the group is re-formed (a parked peer answers /livez 200 and is not lost)",
)
STALLED = ExitCode(
    "5",
    "stalled",
    "the engine stalled: its token counters stood still for LLMD_STALL_SECONDS and a one-token canary "
    "failed or took longer than LLMD_CANARY_SECONDS",
    "engine stalled: {detail}",
    fresh_group_fixes="yes: a hung engine, peer, GPU or transfer starts over",
)
STARTUP_DEADLINE = ExitCode(
    "6",
    "startup-deadline",
    "start-up did not end within LLMD_STARTUP_SECONDS",
    "start-up deadline: not started within LLMD_STARTUP_SECONDS={seconds:g} s; stuck in {where}",
    in_group="exits: LWS recreates the group; but while the checkpoint is still being copied (files of "
    "the model directory still appear or grow) the pod parks instead, its engine running, up to "
    "LLMD_PARK_SECONDS",
    fresh_group_fixes="yes, a hung start-up; not a copy still under way (it parks): time parked (this "
    "pod or a peer) does not count, and an incomplete checkpoint parks at preflight",
)
NOT_RUNNABLE = ExitCode(
    "126, 127",
    "not-runnable",
    "a binary could not be executed, or was not found",
    fresh_group_fixes="no: the image must change (a rollout); preflight finds a missing binary first "
    "and parks",
)
STORE_MASTER_RESTARTED = ExitCode(
    "7",
    "store-master-restarted",
    "a KV store donor's master restarted and lost the donor's registration (its metadata server "
    "came back empty): the donor exits so its restarted container registers again",
    "{master} {rpc} restarted and lost this pod's registration; exiting to register again",
    in_group="not in a group: a donor is a DaemonSet pod; its container restarts",
    fresh_group_fixes="yes: the restarted donor registers its segment again",
)

EXIT_CODES = (
    OK,
    ENGINE_OWN,
    SIGNALLED,
    INTERNAL_ERROR,
    BAD_INPUT,
    ENGINE_QUIT,
    GROUP_BROKEN,
    STALLED,
    STARTUP_DEADLINE,
    STORE_MASTER_RESTARTED,
    NOT_RUNNABLE,
)

# The reason of the Kubernetes Event a pod's end records (launcher/supervise/kube_event.py), one per
# row: short UpperCamelCase, as the kubelet keeps its own (kubernetes/kubernetes pkg/kubelet/events/
# event.go: BackOff, Failed, ...), derived from the row's name (bad-input -> BadInput).
EVENT_REASONS = {row.name: "".join(part.capitalize() for part in row.name.split("-")) for row in EXIT_CODES}
# The one reason that is not an end: a required capability absent holds the pod unready
# (healthchecks/capabilities.py), never ends it.
CAPABILITY_ABSENT = "CapabilityAbsent"


def code_name(code: int) -> str:
    """The name of a row for a code alone (a code the launcher chose, 126/127, 128+N), else the
    engine's own; where a code may be both (an engine exiting 2), the caller names it."""
    for row in EXIT_CODES:
        if row.code.isdigit() and row.number == code:
            return row.name
    if code in (126, 127):
        return NOT_RUNNABLE.name
    return SIGNALLED.name if code > 128 else ENGINE_OWN.name


def exit_code_of(code: int) -> int:
    """A shell-style exit code: a child killed by signal N gives 128+N (SIGKILL 137, SIGTERM 143)."""
    return 128 - code if code < 0 else code


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # real-time signals have no name
        return f"signal {signum}"


def describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal_name(-code)}"
    return f"exited with code {code}"
