"""Which canary a plan asks for (issue #20 A): the request the pool's runner serves, and where the
engine's API key comes from. A generating vLLM pool: a one-token /v1/completions with the value of
VLLM_API_KEY; a pooling one (embedding, classification, reward): /pooling; SGLang: /v1/completions,
or /v1/embeddings with --is-embedding, and no key (it reads one from --api-key only). The dry-run
shows it, and a key in the pod's environment is in no plan output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

ONE_TOKEN = {"prompt": "Hi", "max_tokens": 1, "temperature": 0}
KEY = "sk-plan-0123456789abcdef"


def _pool(tmp_path: Path, kind: str, args: str = "{}") -> dict[str, str]:
    path = tmp_path / "recipe.yaml"
    path.write_text(
        f"name: c\nmodel: {{path: /m, served_name: tiny}}\ndefault_pool: p\npools:\n"
        f"  p:\n    kind: {kind}\n    port: 8000\n    args: {args}\n"
    )
    return {"LLMD_RECIPE_FILE": str(path)}


@pytest.mark.parametrize(
    ("kind", "args", "path", "body", "key"),
    [
        ("vllm", "{}", "/v1/completions", ONE_TOKEN, "VLLM_API_KEY"),
        ("vllm", "{runner: pooling}", "/pooling", {"input": "Hi"}, "VLLM_API_KEY"),
        ("vllm", "{convert: embed}", "/pooling", {"input": "Hi"}, "VLLM_API_KEY"),
        ("vllm", "{convert: classify}", "/pooling", {"input": "Hi"}, "VLLM_API_KEY"),
        ("vllm", "{runner: generate}", "/v1/completions", ONE_TOKEN, "VLLM_API_KEY"),
        ("sglang", "{}", "/v1/completions", ONE_TOKEN, None),
        ("sglang", "{is-embedding: true}", "/v1/embeddings", {"input": "Hi"}, None),
    ],
)  # fmt: skip
def test_the_canary_is_a_request_the_runner_serves(
    plan_json: Any, tmp_path: Path, kind: str, args: str, path: str, body: dict[str, Any], key: str | None
) -> None:
    canary = plan_json(env=_pool(tmp_path, kind, args))["probes"]["forward"]["canary"]
    assert (canary["path"], canary["body"], canary["api_key_env"]) == (path, {"model": "tiny", **body}, key)


def test_the_dry_run_says_which_canary_and_which_key(run_cli: Any, tmp_path: Path) -> None:
    _, out, _ = run_cli("plan", env=_pool(tmp_path, "vllm", "{runner: pooling}"))
    assert 'canary POST /pooling {"model": "tiny", "input": "Hi"} with its key from $VLLM_API_KEY' in out
    assert "vllm:num_requests_running / vllm:num_requests_waiting at 0" in out
    _, out, _ = run_cli("plan", env=_pool(tmp_path, "sglang", "{is-embedding: true}"))
    assert "canary POST /v1/embeddings" in out and "with no key (the engine reads none from env)" in out


def test_the_fixes_name_what_to_change(plan_json: Any, tmp_path: Path) -> None:
    vllm = plan_json(env=_pool(tmp_path, "vllm"))["probes"]["forward"]["canary"]
    assert vllm["key_fix"].startswith("give the container VLLM_API_KEY from the same Secret")
    assert "runner: pooling" in vllm["path_fix"]
    sglang = plan_json(env=_pool(tmp_path, "sglang"))["probes"]["forward"]["canary"]
    assert "only from --api-key" in sglang["key_fix"] and "is-embedding: true" in sglang["path_fix"]


def test_a_key_in_the_pod_env_is_in_no_plan_output(run_cli: Any, tmp_path: Path) -> None:
    env = {**_pool(tmp_path, "vllm"), "VLLM_API_KEY": KEY, "LLMD_EXTRA_ENV": f'{{"VLLM_API_KEY": "{KEY}"}}'}
    for fmt in ("text", "json", "shell"):
        code, out, err = run_cli("plan", "--format", fmt, env=env)
        assert code == 0 and KEY not in out + err and "VLLM_API_KEY" in out
