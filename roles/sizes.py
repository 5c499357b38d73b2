"""A recipe's sizes as bytes (160GB, 512MiB or an int), for the engine families' memory items
(roles/engines/) and the pod's total (roles/memory.py); read the way vLLM reads them: GB, MB, KB are
powers of 1024 (launcher/config/recipe.py)."""

from __future__ import annotations

from launcher.config.recipe import parse_size
from launcher.contract.errors import ConfigError

GIB = 1 << 30


def size_of(value: object, where: str) -> int:
    """Bytes from 160GB, 512MiB or an int; one line naming the recipe field when it is not a size."""
    try:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValueError(f"{str(value)[:32]!r} is not a size")
        return parse_size(value)
    except ValueError as exc:
        raise ConfigError.one(where, str(exc), "write it like 160GB, 512MiB or a number of bytes") from None
