"""Traps a pod fell into with rc 0 from `plan` (issue #33, item 5): a Kubernetes service link in an
engine's env, a NIXL connector with no `nixl:` section (vLLM advertises localhost), and a disagg
sidecar serving its TLS default to the launcher's plain-HTTP check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from launcher.contract.errors import Problem
from launcher.parking import heals_in_place

POD = {"POD_IP": "10.1.2.3"}
NIXL = "{kv-transfer-config: {kv_connector: NixlConnector, kv_role: kv_producer}}"
MULTI = (
    "{kv-transfer-config: {kv_connector: MultiConnector, kv_role: kv_both, kv_connector_extra_config: "
    "{connectors: [{kv_connector: NixlConnector, kv_role: kv_both}, "
    "{kv_connector: OffloadingConnector, kv_role: kv_both}]}}}"
)


def _recipe(tmp_path: Path, pool: str) -> dict[str, str]:
    path = tmp_path / "recipe.yaml"
    path.write_text(f"name: t\nmodel: {{path: /m}}\ndefault_pool: p\npools:\n  p:\n    kind: vllm\n{pool}")
    return {**POD, "LLMD_RECIPE_FILE": str(path)}


# ------------------------------------------------------------------------- (a) service links
@pytest.mark.parametrize(
    ("name", "service"), [("VLLM_PORT", "vllm"), ("VLLM_NIXL_SIDE_CHANNEL_PORT", "vllm-nixl-side-channel")]
)
def test_a_service_link_in_an_engine_port_variable_is_refused_with_the_fix(
    run_cli: Any, tmp_path: Path, name: str, service: str
) -> None:
    """A Service named `vllm` makes the kubelet inject VLLM_PORT=tcp://…, which vLLM refuses at start."""
    env = {**_recipe(tmp_path, ""), name: "tcp://10.96.0.12:8000"}
    code, out, err = run_cli("plan", env=env)
    assert code == 2 and out == ""
    link = "is 'tcp://10.96.0.12:8000', a Kubernetes service link"
    assert err.startswith(f"llm-d-launcher: error: {name}: {link}")
    fix = f"set enableServiceLinks: false in the pod spec (deploy/ does), or rename the Service {service!r}"
    assert fix in err
    assert len(err.splitlines()) == 1


def test_plain_ports_and_other_services_links_pass(plan_json: Any, tmp_path: Path) -> None:
    env = {**_recipe(tmp_path, ""), "VLLM_PORT": "29600", "REDIS_PORT": "tcp://10.96.0.9:6379"}
    assert plan_json(env=env)["processes"][0]["name"] == "engine"


def test_a_service_link_heals_only_by_a_rollout() -> None:
    """The container's env cannot change in place: the parked pod says a new pod is needed."""
    assert not heals_in_place(Problem("VLLM_PORT", "is a service link", "set enableServiceLinks: false"))
    assert not heals_in_place(Problem("SGLANG_PORT", "is a service link", "set enableServiceLinks: false"))


# ------------------------------------------------------------------------- (b) NIXL side channel
@pytest.mark.parametrize("args", [NIXL, MULTI, '{kv_transfer_config: \'{"kv_connector": "NixlConnector"}\'}'])
def test_a_nixl_connector_without_a_nixl_section_gets_the_side_channel_derived(
    plan_json: Any, tmp_path: Path, args: str
) -> None:
    """Without it vLLM advertises `localhost` (VLLM_NIXL_SIDE_CHANNEL_HOST's default) to every peer."""
    engine = plan_json(env=_recipe(tmp_path, f"    args: {args}\n"))["processes"][0]
    assert engine["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "10.1.2.3"
    assert engine["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5600"
    assert {"port": 5600, "name": "nixl-rank0"} in engine["ports"]


def test_a_derived_side_channel_takes_a_port_per_rank(plan_json: Any, tmp_path: Path) -> None:
    pool = f"    layout: data-parallel\n    data_parallel_local: 2\n    args: {NIXL}\n"
    engine = plan_json(env=_recipe(tmp_path, pool))["processes"][0]
    assert [p for p in engine["ports"] if p["name"].startswith("nixl")] == [
        {"port": 5600, "name": "nixl-rank0"},
        {"port": 5601, "name": "nixl-rank1"},
    ]


def test_a_nixl_connector_from_extra_args_is_refused_in_one_line(run_cli: Any, tmp_path: Path) -> None:
    extra = '--kv-transfer-config \'{"kv_connector":"NixlConnector","kv_role":"kv_both"}\''
    code, out, err = run_cli("plan", env={**_recipe(tmp_path, ""), "LLMD_EXTRA_ARGS": extra})
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "LLMD_EXTRA_ARGS: runs a NIXL connector (--kv-transfer-config) in pool p" in err
    assert "put the --kv-transfer-config in the pool's args in the recipe" in err


def test_other_connectors_get_no_side_channel(plan_json: Any, tmp_path: Path) -> None:
    args = "    args: {kv-transfer-config: {kv_connector: OffloadingConnector, kv_role: kv_both}}\n"
    engine = plan_json(env=_recipe(tmp_path, args))["processes"][0]
    assert "VLLM_NIXL_SIDE_CHANNEL_HOST" not in engine["env"]


# ------------------------------------------------------------------------- (c) the sidecar's TLS
HTTP_HEALTH = {"port": 8000, "path": "/health"}


def _sidecar(plan: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in plan["processes"] if p["name"] == "disagg-sidecar")


@pytest.mark.parametrize(
    ("fields", "flag", "health"),
    [
        ("", "--secure-proxy=false", HTTP_HEALTH),
        ("tls: false, args: {secure-proxy: false}", "--secure-proxy=false", HTTP_HEALTH),
        ("tls: true", "--secure-proxy=true", {"host": "127.0.0.1", "port": 8000}),
    ],
)
def test_the_sidecar_is_told_its_tls_and_checked_by_it(
    plan_json: Any, tmp_path: Path, fields: str, flag: str, health: dict[str, Any]
) -> None:
    """Upstream serves TLS by default (llm-d/llm-d-router pkg/sidecar/proxy/options.go); the launcher's
    check of GET /health is plain HTTP, so a sidecar left at its default never passed it."""
    pool = f"    port: 8200\n    disagg_sidecar: {{{fields}}}\n"
    sidecar = _sidecar(plan_json(env=_recipe(tmp_path, pool)))
    assert flag in sidecar["argv"]
    assert sidecar["health"] == health


def test_a_tls_flag_in_the_sidecars_args_that_disagrees_is_refused(run_cli: Any, tmp_path: Path) -> None:
    pool = "    port: 8200\n    disagg_sidecar: {args: {secure-serving: true}}\n"
    code, out, err = run_cli("plan", env=_recipe(tmp_path, pool))
    assert code == 2 and out == ""
    assert "args.secure-serving is True but tls is False: set disagg_sidecar.tls" in err
