"""`llm-d-launcher catalog build`: run generate.py in the engine's own interpreter and write the
versioned catalogue (<catalogue>-<version>.json) where `run` and `plan` look first."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from launcher.contract.errors import ConfigError
from roles.engines import FAMILIES
from roles.flags import file_name, parse_catalog

GENERATOR = Path(__file__).with_name("generate.py")
BUILD_TIMEOUT = 600.0  # importing an engine's parser takes 5-50 s on a busy CPU
CATALOG_MODE = 0o644  # written as root at image build time, read by whatever user the pod runs as
CATALOGS = {f.package: f.catalog for f in FAMILIES if f.package and f.catalog}  # --engine -> catalogue


def build_catalog(engine: str, python: str, out_dir: str) -> Path:
    """The written file. -I: the engine's interpreter sees neither PYTHONPATH nor this package."""
    name = CATALOGS.get(engine)
    if name is None:
        fix = f"use one of {', '.join(sorted(CATALOGS))}"
        raise ConfigError.one("--engine", f"{engine!r} has no flag catalogue", fix)
    try:
        done = subprocess.run(
            [python, "-I", str(GENERATOR), name],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        message = f"{python} could not run the {engine} generator ({exc})"
        raise ConfigError.one("--python", message, _FIX) from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise ConfigError.one("--python", f"{python} could not read {engine}'s parser: {last[:300]}", _FIX)
    target = Path(out_dir)
    try:
        version = parse_catalog(name, done.stdout, str(target)).version
    except (ValueError, KeyError, TypeError):
        first = (done.stdout.strip().splitlines() or ["nothing"])[0]
        message = f"{python} printed no flag catalogue ({first[:200]})"
        raise ConfigError.one("--python", message, _FIX) from None
    path = target / file_name(name, version)
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=target, delete=False, suffix=".tmp") as handle:
        handle.write(done.stdout)
        os.fchmod(handle.fileno(), CATALOG_MODE)  # tempfile makes it 0600: unreadable to the pod's user
    os.replace(handle.name, path)
    return path


_FIX = "give the interpreter the engine is installed in (the venv's bin/python)"
