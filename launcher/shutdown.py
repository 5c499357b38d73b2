"""How the pod's termination grace period is split between the engine's drain, the sidecars and the
final SIGKILL. Pure arithmetic: the plan uses it for the engine's --shutdown-timeout, the supervisor for
its deadlines, so the two always agree.

Timeline after SIGTERM reaches the launcher (t = 0, grace = LLMD_GRACE_SECONDS):

    0 ── SIGTERM engine ── drain (--shutdown-timeout) ── teardown ── engine_deadline
      ── SIGTERM sidecars (sooner if the engine is gone) ── kill_at: SIGKILL what is left ── grace
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ShutdownBudget:
    grace: int  # seconds from SIGTERM until the kubelet SIGKILLs the pod
    kill_margin: int  # SIGKILL this long before the kubelet would, so exit codes and logs are ours
    sidecar_window: int  # time the sidecars get after the engine
    teardown: int  # engine time after its drain (vLLM's DP supervisor waits drain + 5 s)

    @classmethod
    def from_grace(cls, grace: int) -> ShutdownBudget:
        kill_margin = min(5, max(1, grace // 10))
        sidecar_window = min(5, grace // 6)
        engine_window = max(0, grace - kill_margin - sidecar_window)
        return cls(grace, kill_margin, sidecar_window, min(5, engine_window // 4))

    @property
    def kill_at(self) -> int:
        return max(0, self.grace - self.kill_margin)

    @property
    def engine_deadline(self) -> int:
        return max(0, self.kill_at - self.sidecar_window)

    @property
    def drain(self) -> int:
        """The engine's --shutdown-timeout: how long it may finish in-flight requests."""
        return max(0, self.engine_deadline - self.teardown)
