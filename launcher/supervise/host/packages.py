"""Ask the engine's own interpreter, without importing the engine (~30 ms), whether every module the
plan needs can be found and which engine version is installed: the plan's flag catalogue is chosen by
that version (launcher/run.py), and the recipe pool's engine_versions must admit it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from launcher.contract.errors import Problem
from launcher.contract.plan import Plan
from launcher.supervise.spawn import search_path

PROBE_TIMEOUT = 15.0
# Prints {"found": {module: bool}, "version": str | null}; find_spec of a top-level name imports nothing.
_PROBE = """
import importlib.metadata as m, importlib.util as u, json, sys
mods, dist = json.loads(sys.argv[1]), sys.argv[2]
try:
    version = m.version(dist) if dist else None
except m.PackageNotFoundError:
    version = None
print(json.dumps({"found": {x: u.find_spec(x) is not None for x in mods}, "version": version}))
"""
CATALOG_FIX = (
    "build the image's catalogue (llm-d-launcher catalog build --engine ENGINE --python PYTHON, into "
    "LLMD_CATALOG_DIR); a flag only the image's engine has can be named in LLMD_ALLOW_FLAGS"
)


@dataclass(frozen=True)
class EngineFacts:
    python: str
    package: str | None
    installed: str | None  # None: the package's metadata is not there
    catalog: str | None
    catalog_source: str | None = None

    @property
    def matches(self) -> bool:
        """0.32.0+cpu is 0.32.0: a local build label does not change the flags."""
        return self.installed is not None and self.installed.split("+")[0] == self.catalog

    def as_dict(self) -> dict[str, object]:
        return {
            "package": self.package,
            "catalog_version": self.catalog,
            "catalog_source": self.catalog_source,
            "installed_version": self.installed,
            "matches": self.matches,
            "python": self.python,
        }


def engine_python(binary: str, path: str) -> str | None:
    """The interpreter that runs the engine: argv[0] itself (python3 -m ...), or the one named by the
    console script's shebang (vllm -> /venv/bin/python)."""
    found = shutil.which(binary, path=path)
    if found is None:
        return None
    if Path(found).name.startswith("python"):
        return found
    try:
        with open(found, "rb") as handle:
            first = handle.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if words and Path(words[0]).name == "env" and len(words) > 1:
        return shutil.which(words[1], path=path)
    return words[0] if words else None


def probe(python: str, modules: list[str], package: str | None, path: str) -> dict[str, object]:
    done = subprocess.run(
        [python, "-I", "-c", _PROBE, json.dumps(modules), package or ""],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT,
        env={**os.environ, "PATH": path},
        check=False,
    )
    if done.returncode != 0:
        raise OSError(
            done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
        )
    data = json.loads(done.stdout)
    return data if isinstance(data, dict) else {}


def installed_version(plan: Plan, bin_path: str) -> str | None:
    """The engine version the plan's interpreter has, asked before the plan is final (the catalogue
    depends on it); None when it cannot tell (check_packages then says why)."""
    package = plan.needs.engine_package
    path = search_path(bin_path, dict(plan.engine.env))
    python = engine_python(plan.engine.argv[0], path) if package else None
    if python is None:
        return None
    try:
        version = probe(python, [], package, path).get("version")
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return version if isinstance(version, str) else None


def outside_versions(package: str, installed: str | None, versions: str, python: str) -> Problem | None:
    """The recipe pool's engine_versions must admit the engine installed (a local label such as +cpu
    aside): flags written for one release may mean something else, or nothing, in another."""
    try:
        release = Version(installed).public if installed else None
    except InvalidVersion:
        release = None
    if release is not None and SpecifierSet(versions).contains(release, prereleases=True):
        return None
    found = f"{package} {installed}" if installed else f"no {package} package metadata"
    return Problem(
        "engine version",
        f"the recipe pool was written for {package} {versions} but {python} has {found}",
        f"run an image with {package} {versions}, or update the pool's flags and its engine_versions",
    )


def check_packages(plan: Plan, bin_path: str) -> tuple[EngineFacts | None, list[Problem], list[Problem]]:
    """(engine facts, problems, warnings)."""

    needs = plan.needs
    engine = plan.engine
    path = search_path(bin_path, dict(engine.env))
    python = engine_python(engine.argv[0], path)
    if python is None:
        return None, [], []  # check_binaries names a missing binary; a non-Python engine has nothing to ask
    try:
        data = probe(python, [m.module for m in needs.modules], needs.engine_package, path)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        warning = Problem(
            f"engine interpreter {python}", f"could not be asked for its packages ({exc})", "check the image"
        )
        return None, [], [warning]
    found = data.get("found")
    found = found if isinstance(found, dict) else {}
    problems = [
        Problem(
            m.why,
            f"needs Python module {m.module}, which {python} cannot find",
            f"install package {m.package} in the engine's image (pip install {m.package}), or change {m.why}",
        )
        for m in needs.modules
        if not found.get(m.module)
    ]
    installed = data.get("version")
    facts = EngineFacts(
        python,
        needs.engine_package,
        installed if isinstance(installed, str) else None,
        needs.catalog_version,
        needs.catalog_source,
    )
    if needs.engine_package and needs.engine_versions:
        refused = outside_versions(needs.engine_package, facts.installed, needs.engine_versions, python)
        problems += [refused] if refused else []
    warnings = []
    if needs.engine_package and not facts.matches:
        what = (
            f"{needs.engine_package} {facts.installed}"
            if facts.installed
            else f"no {needs.engine_package} package metadata"
        )
        warnings.append(
            Problem(
                "flag catalogue",
                f"flags were checked against {needs.engine_package} {needs.catalog_version} but "
                f"{python} has {what}",
                CATALOG_FIX,
            )
        )
    return facts, problems, warnings
