"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from tests.unit.user_recipe import USER_RECIPE


@pytest.fixture
def user_recipe(tmp_path: Path) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text(USER_RECIPE)
    return str(path)


@pytest.fixture(autouse=True)
def _structlog_as_new() -> Iterator[None]:
    """A test that runs `main()` in-process configures structlog to print to the stderr pytest gave
    it, closed once that test ends: a later test's logger would raise there (the KV-event watcher's
    replay task died on it, and a gap was never asked for again). Each test starts from the defaults."""
    yield
    structlog.reset_defaults()
