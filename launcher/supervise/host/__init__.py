"""Host checks run before spawning: is the host the pod landed on able to run this plan? Network
identity, memory and memlock, a complete checkpoint, the engine's packages and version. Each check
returns problems tagged with its name; the recipe's `host.advisory` turns a check's problems into
warnings (README "Preflight")."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from launcher.contract.errors import Problem
from launcher.contract.plan import Plan, RdmaPort
from launcher.supervise.host import accelerators, checkpoint, memory, network, packages, rdma


@dataclass
class HostReport:
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    ifname: str | None = None  # the interface that holds POD_IP
    rdma: tuple[RdmaPort, ...] = ()  # the pod's active RDMA ports
    engine: packages.EngineFacts | None = None  # the installed engine, as its interpreter reports it
    facts: dict[str, object] = field(default_factory=dict)  # for the log


def check_host(plan: Plan, bin_path: str, sysfs_root: str = "/sys", dev_root: str = "/dev") -> HostReport:
    report = HostReport()
    found: list[tuple[str, Problem]] = []
    needs = plan.needs
    devices = accelerators.check_accelerators(plan, os.environ, dev_root, sysfs_root)
    found += [("accelerators", p) for p in devices]
    if needs.rdma is not None:
        report.rdma = rdma.rdma_ports(sysfs_root, dev_root)
        report.facts["rdma"] = [p.name for p in report.rdma]
        if needs.rdma.required_by and not report.rdma:
            found.append(("rdma", rdma.missing(needs.rdma, sysfs_root)))
    if needs.network:
        report.ifname, problems = network.check_network(plan)
        found += [("network", p) for p in problems]
        report.facts["interface"] = report.ifname
    if needs.memory:
        for name, problem in memory.check_memory(plan):
            found.append((name, problem))
    if needs.model_files and plan.model_path and (Path(plan.model_path) / "config.json").is_file():
        # (a missing directory or config.json is preflight's check_model's to report)
        found += [("checkpoint", p) for p in checkpoint.check_checkpoint(plan.model_path, plan.engine.argv)]
    if needs.drafter:
        found += [("drafter", p) for p in checkpoint.check_drafter(needs.drafter, plan.engine.env)]
    if needs.modules or needs.engine_package:
        report.engine, problems, warnings = packages.check_packages(plan, bin_path)
        found += [("packages", p) for p in problems]
        report.warnings += warnings
    for name, problem in found:
        (report.warnings if name in needs.advisory else report.problems).append(problem)
    return report
