"""Supervisor tier: `llm-d-launcher run` over the STAND-IN engine and render sidecar of
tests/standins/vllm (the real engine is exercised in tests/engines)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.pods import STANDINS, LauncherPod
from tests.ports import free_port

MakePod = Callable[..., LauncherPod]


def write_recipe(
    workdir: Path, *, port: int, render_port: int | None, nodes: int = 1, args: str | None = None
) -> Path:
    model = workdir / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    (model / "tokenizer.json").write_text("{}")
    render = f"    render: {{port: {render_port}}}\n" if render_port else ""
    recipe = workdir / "recipe.yaml"
    recipe.write_text(
        "name: standin\n"
        f"model: {{path: {model}}}\n"
        "default_pool: p\n"
        "pools:\n"
        "  p:\n"
        "    kind: vllm\n"
        f"    nodes: {nodes}\n"
        f"    tensor_parallel: {nodes}\n"
        f"    port: {port}\n"
        f"    master_port: {free_port()}\n"
        f"{render}" + (f"    args: {args}\n" if args else "")
    )
    return recipe


@pytest.fixture
def make_pod(tmp_path: Path) -> Iterator[MakePod]:
    pods: list[LauncherPod] = []

    def make(
        env: dict[str, str] | None = None, *, render: bool = True, nodes: int = 1, args: str | None = None
    ) -> LauncherPod:
        """args: the pool's engine args, as a YAML flow mapping."""
        workdir = tmp_path / f"pod{len(pods)}"
        workdir.mkdir()
        port = free_port()
        recipe = write_recipe(
            workdir, port=port, render_port=free_port() if render else None, nodes=nodes, args=args
        )
        base = {
            "LLMD_RECIPE_FILE": str(recipe),
            "POD_IP": "127.0.0.1",
            "LLMD_BIN_PATH": str(STANDINS),
            "LLMD_RESTART_BACKOFF_SECONDS": "0.05",
            "LLMD_DEREGISTER_SECONDS": "0",  # test_liveness.py sets it where it is the subject
        }
        pod = LauncherPod(workdir, {**base, **(env or {})}, port=port)
        pods.append(pod)
        return pod

    yield make
    for pod in pods:  # a failed test must not leak processes into the next one
        pod.kill_everything()
