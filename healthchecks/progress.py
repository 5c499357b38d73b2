"""Start-up progress read from the engine's own output: which phase it is in and how many weight
shards are loaded. A 45-minute load should say what it is doing; the engine only says it in its logs.

Which lines announce which phase is the plan's data (`Probes.progress`, from the engine's family in
roles/engines/); the patterns match anywhere in a line, so per-process prefixes and log formats do not
matter. The weight-loading bars are tqdm's (fastsafetensors `parallel_loader.py` among them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from launcher.contract.plan import StartupOutput

# tqdm bars of every weight loader of both engines: "<desc>: 42% Completed | 5/12 [" (vLLM's format;
# SGLang 0.5.23's "Multi-thread loading shards") or "<desc>:  42%|████      | 5/12 [" (tqdm's default,
# SGLang's fastsafetensors path).
_SHARDS = re.compile(
    r"(?P<desc>(?:[\w-]+ )?[Ll]oading [^:|]{1,80}):\s+\d{1,3}%.*?\|\s*(?P<n>\d+)/(?P<total>\d+)\s*\["
)
_SOURCE = re.compile(r"^\((?P<source>[^)]{1,80})\)")  # vLLM: (EngineCore_DP0 pid=12) for each rank


@dataclass
class ShardProgress:
    desc: str
    loaded: int
    total: int


@dataclass
class StartupProgress:
    """Fed the engine's output lines until start-up ends."""

    output: StartupOutput | None  # None: a process whose output tells nothing (a Mooncake service)
    # The latest phase the engine's output named; None (unknown) until a phase line comes, so an engine
    # whose lines changed shows the launcher's own phase, never a stale or wrong one.
    phase: str | None = None
    shards: dict[str, ShardProgress] = field(default_factory=dict)  # by the rank that printed the bar

    def feed(self, line: str) -> bool:
        """True when the line changed what is known."""
        if self.output is None:
            return False
        if "oading " in line and "/" in line and (bar := _SHARDS.search(line)):
            source = m.group("source") if (m := _SOURCE.match(line)) else ""
            self.shards[source] = ShardProgress(
                bar.group("desc"), int(bar.group("n")), int(bar.group("total"))
            )
            return True  # progress only: a bar's end says nothing of the phase after it
        for pattern in self.output.phases:
            if pattern.text in line:
                self.phase = pattern.phase
                return True
        return False

    @property
    def weight_ratio(self) -> float | None:
        """Shards loaded over shards to load, summed over every rank that reports a bar."""
        total = sum(s.total for s in self.shards.values())
        if not total:
            return None
        return min(1.0, sum(s.loaded for s in self.shards.values()) / total)

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if (ratio := self.weight_ratio) is not None:
            out["weights_loaded_ratio"] = round(ratio, 4)
            out["shards"] = [
                {"rank": source or None, "what": s.desc, "loaded": s.loaded, "total": s.total}
                for source, s in self.shards.items()
            ]
        return out
