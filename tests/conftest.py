"""Shared fixtures: every test starts from an environment with no pod or launcher settings."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from launcher.cli import main
from launcher.config.recipe_file import read_recipe

_POD_ENV = ("LWS_", "LLMD_", "POD_", "TPU_", "NODE_NAME")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith(_POD_ENV):
            monkeypatch.delenv(name)
    read_recipe.cache_clear()
    yield
    read_recipe.cache_clear()


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """main(argv) in-process with extra env: returns (exit code, stdout, stderr)."""

    def run(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        read_recipe.cache_clear()
        code = main(list(argv))
        out, err = capsys.readouterr()
        for key in env or {}:
            monkeypatch.delenv(key)
        return code, out, err

    return run


@pytest.fixture
def plan_json(run_cli: Run) -> Callable[..., dict[str, Any]]:
    def plan(*argv: str, env: dict[str, str] | None = None) -> dict[str, Any]:
        code, out, err = run_cli("plan", "--format", "json", *argv, env=env)
        assert code == 0, err
        data: dict[str, Any] = json.loads(out)
        return data

    return plan
