"""The flag catalogues a pod may use: what its image built (LLMD_CATALOG_DIR), then the built-in ones."""

from __future__ import annotations

import json
from pathlib import Path

from launcher.contract.errors import ConfigError, Problem
from roles.engines import FAMILIES
from roles.flags import FlagCatalog, built_in_catalogs, parse_catalog

_NAMES = sorted({f.catalog for f in FAMILIES if f.catalog}, key=len, reverse=True)


def load_shelf(directory: str) -> tuple[FlagCatalog, ...]:
    """A file that is not a catalogue stops the pod (exit 2): the image meant it to be used."""
    image = []
    folder = Path(directory) if directory else None
    for path in sorted(folder.glob("*.json")) if folder and folder.is_dir() else []:
        name = next((n for n in _NAMES if path.name.startswith(f"{n}-")), None)
        if name is None:
            continue
        try:
            image.append(parse_catalog(name, path.read_text(encoding="utf-8"), str(path)))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else f"{type(exc).__name__}: {exc}"
            raise ConfigError(
                [
                    Problem(
                        "LLMD_CATALOG_DIR",
                        f"{path} is not a flag catalogue ({reason[:120]})",
                        "rebuild it: llm-d-launcher catalog build --engine ENGINE --python PYTHON",
                    )
                ]
            ) from None
    return (*image, *built_in_catalogs())
