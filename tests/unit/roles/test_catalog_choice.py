"""The pod's flag catalogue follows the engine installed (roles/flags.py choose_catalog), an image's
own catalogue comes first (launcher/catalogs/shelf.py), and LLMD_ALLOW_FLAGS lets through only the
unknown flags it names."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from launcher.config.recipe_file import RecipeSource, load_recipe
from launcher.config.settings import Settings
from roles import FoundInPod, build_plan
from roles.flags import BUILT_IN, built_in_catalogs, choose_catalog, load_catalog

V032 = load_catalog("vllm-serve", "0.32.0")
IMAGE_034 = replace(V032, version="0.34.0", source="/opt/llm-d-launcher/catalogs/vllm-serve-0.34.0.json")
IMAGE_032 = replace(V032, source="/opt/llm-d-launcher/catalogs/vllm-serve-0.32.0.json")


def test_the_installed_version_picks_its_catalogue() -> None:
    shelf = built_in_catalogs()
    assert {c.version for c in shelf if c.name == "vllm-serve"} >= {"0.32.0", "0.33.0"}
    assert choose_catalog(shelf, "vllm-serve", "0.33.0", "0.32.0").version == "0.33.0"
    assert choose_catalog(shelf, "vllm-serve", "0.32.0+cpu", "0.32.0").version == "0.32.0"


def test_an_image_catalogue_comes_before_the_built_in_one() -> None:
    shelf = (IMAGE_032, IMAGE_034, *built_in_catalogs())
    assert choose_catalog(shelf, "vllm-serve", "0.32.0", "0.32.0") is IMAGE_032
    assert choose_catalog(shelf, "vllm-serve", "0.34.0", "0.32.0") is IMAGE_034
    # An engine no catalogue matches (or an unknown one): the image's, which it built from its engine.
    assert choose_catalog(shelf, "vllm-serve", "0.35.0", "0.32.0") is IMAGE_032
    assert choose_catalog(shelf, "vllm-serve", None, "0.32.0") is IMAGE_032
    # Without one: the built-in default, not the newest.
    assert choose_catalog(built_in_catalogs(), "vllm-serve", "9.0", "0.32.0").version == "0.32.0"


def _plan(tmp_path: Path, version: str | None, catalog_dir: str = "", **env: Any) -> Any:
    settings = Settings(recipe="vllm-single-pod", catalog_dir=catalog_dir, **env)
    recipe = load_recipe(RecipeSource(name="vllm-single-pod", file=None))
    from launcher.catalogs.shelf import load_shelf

    return build_plan(
        settings, recipe, found=FoundInPod(engine_version=version), shelf=load_shelf(catalog_dir)
    )


def test_the_plan_says_which_catalogue(tmp_path: Path) -> None:
    needs = _plan(tmp_path, "0.33.0").needs
    assert (needs.catalog_version, needs.catalog_source) == ("0.33.0", BUILT_IN)
    built = tmp_path / "vllm-serve-0.34.0.json"
    data = json.loads((Path(__file__).parents[3] / "roles/catalogs/vllm-serve-0.32.0.json").read_text())
    built.write_text(json.dumps({**data, "version": "0.34.0"}))
    needs = _plan(tmp_path, "0.34.0", str(tmp_path)).needs
    assert (needs.catalog_version, needs.catalog_source) == ("0.34.0", str(built))


def test_a_broken_image_catalogue_is_one_line_exit_2(run_cli: Any, tmp_path: Path) -> None:
    (tmp_path / "vllm-serve-0.34.0.json").write_text("{not json")
    code, out, err = run_cli(
        "plan", env={"LLMD_RECIPE": "vllm-single-pod", "LLMD_CATALOG_DIR": str(tmp_path)}
    )
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "LLMD_CATALOG_DIR" in err and "vllm-serve-0.34.0.json is not a flag catalogue" in err


def test_plan_prints_the_catalogue_in_use(run_cli: Any) -> None:
    code, out, _ = run_cli("plan", env={"LLMD_RECIPE": "vllm-single-pod", "LLMD_CATALOG_DIR": ""})
    assert code == 0 and "flags checked against the vllm 0.32.0 catalogue (built-in)" in out


def test_allow_flags_lets_through_only_the_flags_it_names(run_cli: Any) -> None:
    env = {"LLMD_RECIPE": "vllm-single-pod", "LLMD_ALLOW_FLAGS": "--brand-new-flag"}
    code, out, _ = run_cli("plan", "--extra-args", "--brand-new-flag 1", env=env)
    assert code == 0 and "--brand-new-flag 1" in out
    code, _, err = run_cli("plan", "--extra-args", "--brand-new-flag 1 --other-new-flag 2", env=env)
    assert code == 2 and "--other-new-flag is not a vllm serve 0.32.0 flag" in err
    # A known flag's value is still checked.
    env["LLMD_ALLOW_FLAGS"] = "--brand-new-flag,--max-num-seqs"
    code, _, err = run_cli("plan", "--extra-args", "--max-num-seqs many", env=env)
    assert code == 2 and "--max-num-seqs needs an integer" in err


def test_allow_flags_never_lets_a_secret_or_a_derived_flag_through(run_cli: Any) -> None:
    code, _, err = run_cli("plan", env={"LLMD_RECIPE": "vllm-single-pod", "LLMD_ALLOW_FLAGS": "--hf-token"})
    assert code == 2 and "LLMD_ALLOW_FLAGS" in err and "secret" in err
    env = {"LLMD_RECIPE": "vllm-single-pod", "LLMD_ALLOW_FLAGS": "--port"}
    code, _, err = run_cli("plan", "--extra-args", "--port 9", env=env)
    assert code == 2 and "--port" in err


def _messages(version: str, text: str, name: str = "vllm-serve") -> list[str]:
    from roles.args import split_extra_args
    from roles.flags import check_flags

    return [p.message for p in check_flags(load_catalog(name, version), split_extra_args(text, "X"), "X")]


def test_vllm_033_renamed_the_no_forms_of_its_switches() -> None:
    """Real difference (both catalogues built from the engines' parsers): 0.33 turned
    --no-enable-prefix-caching into --disable-prefix-caching (and --no-disable-X into --enable-X)."""
    assert _messages("0.32.0", "--no-enable-prefix-caching --no-disable-hybrid-kv-cache-manager") == []
    assert _messages("0.33.0", "--disable-prefix-caching --enable-hybrid-kv-cache-manager") == []
    [old] = _messages("0.33.0", "--no-enable-prefix-caching")
    assert "--no-enable-prefix-caching" in old and "vllm serve 0.33.0" in old
    [new] = _messages("0.32.0", "--disable-prefix-caching")
    assert "not a vllm serve 0.32.0 flag" in new


def test_a_flag_new_in_033_passes_only_with_the_033_catalogue() -> None:
    assert _messages("0.33.0", "--watchdog-config {}") == []
    [problem] = _messages("0.32.0", "--watchdog-config {}")
    assert "--watchdog-config is not a vllm serve 0.32.0 flag" in problem


def test_sglang_0523_changed_flags_against_0522() -> None:
    """Real differences (both catalogues built from the engines' parsers): 0.5.23 dropped
    --speculative-skip-dp-mlp-sync, added --enable-hicache (among 12), and gave four store_true switches
    a --no- form (BooleanOptionalAction)."""
    assert _messages("0.5.22", "--speculative-skip-dp-mlp-sync", "sglang-server") == []
    [gone] = _messages("0.5.23", "--speculative-skip-dp-mlp-sync", "sglang-server")
    assert "--speculative-skip-dp-mlp-sync is not a sglang.launch_server 0.5.23 flag" in gone
    assert _messages("0.5.23", "--enable-hicache", "sglang-server") == []
    [new] = _messages("0.5.22", "--enable-hicache", "sglang-server")
    assert "--enable-hicache is not a sglang.launch_server 0.5.22 flag" in new
    assert _messages("0.5.23", "--no-enable-tf32-matmul", "sglang-server") == []
    [no_form] = _messages("0.5.22", "--no-enable-tf32-matmul", "sglang-server")
    assert "--enable-tf32-matmul has no --no- form in sglang.launch_server 0.5.22" in no_form
    assert choose_catalog(built_in_catalogs(), "sglang-server", "0.5.22", "0.5.23").version == "0.5.22"
