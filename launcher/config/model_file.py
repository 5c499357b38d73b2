"""The model's config.json, read for the checks in roles/engines/model_config.py: `plan --model-config
FILE`, and in the pod the mounted checkpoint's own (a few KiB; bounded at 4 MiB)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launcher.contract.errors import ConfigError

FIX = "give the model's config.json"


def read_model_config(path: str, setting: str) -> dict[str, Any]:
    """The file's JSON object, or one line naming `setting` when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read(4 << 20))
    except (OSError, ValueError) as exc:
        raise ConfigError.one(setting, f"cannot read {path!r} as JSON ({exc})"[:200], FIX) from None
    if not isinstance(data, dict):
        raise ConfigError.one(setting, f"{path!r} holds no JSON object", FIX)
    return data


def checkpoint_config(model_path: str | None) -> dict[str, Any] | None:
    """A mounted checkpoint's config.json (model.path an absolute directory holding one); None for a
    hub id or a checkpoint not mounted yet (preflight says so)."""
    if not model_path or not model_path.startswith("/"):
        return None
    path = Path(model_path) / "config.json"
    return read_model_config(str(path), "model.path") if path.is_file() else None
