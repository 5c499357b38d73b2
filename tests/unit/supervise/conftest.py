"""Fixtures shared by the supervise unit tests."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def shm() -> Iterator[Path]:
    """A directory of our own on the machine's /dev/shm (a tmpfs); only it is ever touched."""
    root = Path("/dev/shm") / f"llmd-test-{uuid.uuid4().hex}"
    root.mkdir()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
