"""Engine flags are checked against catalogues generated from the engines' own parsers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roles.args import flag_value, flag_values, split_extra_args
from roles.flags import check_flags, load_catalog

VLLM = load_catalog("vllm-serve", "0.32.0")


def problems(text: str) -> list[str]:
    return [p.message for p in check_flags(VLLM, split_extra_args(text, "X"), "X")]


@pytest.mark.parametrize(
    "extra",
    [
        "--max-num-seqs 64",
        "--max_num_seqs 64",  # vLLM accepts underscores
        "--max-num-seqs=64",
        "--enforce-eager",
        "--no-enable-prefix-caching",
        "--kv-cache-dtype fp8_e4m3",
        """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'""",
        "--kv-transfer-config None",  # optional JSON
        "--compilation-config.mode 3",  # one key of a JSON flag
        "--gpu-memory-utilization 0.9",
        "--served-model-name a b",  # a list
    ],
)
def test_valid_flags_pass(extra: str) -> None:
    assert problems(extra) == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("--max-num-sequences 64", "--max-num-sequences is not a vllm serve 0.32.0 flag (did you mean"),
        ("--max-num-seq 64", "--max-num-seq is an abbreviation of --max-num-seqs"),
        ("--kv-cache-dtype fp9", "--kv-cache-dtype 'fp9' is not one of vllm serve 0.32.0's choices"),
        ("--kv-transfer-config {bad", "--kv-transfer-config needs valid JSON (Expecting property name"),
        ("--max-num-seqs lots", "--max-num-seqs needs an integer, got 'lots'"),
        ("--gpu-memory-utilization high", "--gpu-memory-utilization needs a number, got 'high'"),
        ("--enforce-eager true", "--enforce-eager is a switch and takes no value (got 1)"),
        ("--max-num-seqs", "--max-num-seqs needs a value"),
        ("--max-num-seqs 1 2", "--max-num-seqs takes one value (got 2)"),
        ("--max-num-seqs.x 1", "--max-num-seqs.x: --max-num-seqs takes no JSON keys"),
    ],
)
def test_mistakes_are_named(extra: str, message: str) -> None:
    found = problems(extra)
    assert len(found) == 1 and found[0].startswith(message), found


def test_sglang_catalogue_knows_the_kimi_parsers() -> None:
    sglang = load_catalog("sglang-server", "0.5.23")
    ok = split_extra_args("--tool-call-parser kimi_k3 --hicache-ratio 2 --enable-hierarchical-cache", "X")
    assert check_flags(sglang, ok, "X") == []
    [bad] = check_flags(sglang, split_extra_args("--tool-call-parser kimi_k4", "X"), "X")
    assert "(did you mean kimi_k3?)" in bad.message


def test_extra_args_mistake_is_one_line_exit_2(run_cli: Any) -> None:
    code, _, err = run_cli("plan", "--pool", "decode", "--extra-args", "--max-num-sequences 64")
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("llm-d-launcher: error: LLMD_EXTRA_ARGS: --max-num-sequences is not a vllm serve")
    assert "LLMD_ALLOW_FLAGS" in err


def vllm_recipe(tmp_path: Path, args: str) -> Path:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"name: r\nmodel: {{path: /m}}\ndefault_pool: p\npools:\n  p:\n    kind: vllm\n    args: {args}\n"
    )
    return recipe


def test_recipe_arg_mistake_names_its_place(run_cli: Any, tmp_path: Path) -> None:
    recipe = vllm_recipe(tmp_path, "{kv-cache-dtype: fp9}")
    code, _, err = run_cli("plan", env={"LLMD_RECIPE_FILE": str(recipe)})
    assert code == 2
    assert f"error: LLMD_RECIPE_FILE: {recipe}: pools.p.args: --kv-cache-dtype 'fp9' is not one of" in err


def test_one_named_flag_can_be_allowed_for_a_newer_engine(run_cli: Any) -> None:
    env = {"LLMD_ALLOW_FLAGS": "--brand-new-flag"}
    code, out, _ = run_cli("plan", "--pool", "decode", "--extra-args", "--brand-new-flag 1", env=env)
    assert code == 0 and "--brand-new-flag 1" in out


@pytest.mark.parametrize(
    "extra",
    [
        "-q fp8",  # short options exist (quantization, compilation, speculative, ...)
        "-O3",  # FlexibleArgumentParser's optimisation level
        "-O 3",
        "-cc {}",
        "--long-prefill-token-threshold 4",  # names a token but is no secret
        "--allow-credentials",  # CORS switch
        "--hf-token",  # value optional (nargs='?')
        "--logits-processors -1",  # negative numbers are values, not flags
    ],
)
def test_forms_vllm_accepts_are_not_refused(extra: str) -> None:
    from roles.args import merge_extra

    args = split_extra_args(extra, "X")
    if "hf-token" not in extra:
        merge_extra([], args, {}, "X")  # not mistaken for a secret flag
    assert check_flags(VLLM, args, "X") == []


def test_a_recipe_false_on_a_switch_without_no_form_is_explained(run_cli: Any, tmp_path: Path) -> None:
    recipe = vllm_recipe(tmp_path, "{disable-log-stats: false}")
    code, _, err = run_cli("plan", env={"LLMD_RECIPE_FILE": str(recipe)})
    assert code == 2
    assert "--no-disable-log-stats: --disable-log-stats has no --no- form in vllm serve 0.32.0" in err
    assert "leave --disable-log-stats out to keep it off" in err


def test_sglang_takes_no_underscore_spelling() -> None:
    sglang = load_catalog("sglang-server", "0.5.23")
    [problem] = check_flags(sglang, split_extra_args("--tp_size 2", "X"), "X")
    assert "(did you mean --tp-size?)" in problem.message


def test_bad_json_is_not_echoed() -> None:
    [message] = problems("""--kv-transfer-config '{"access_key": "AKIA-SECRET'""")
    assert "AKIA" not in message and "needs valid JSON" in message


def test_env_flag_refuses_secret_names(run_cli: Any) -> None:
    code, _, err = run_cli("plan", "--env", "HF_TOKEN=hf_value_123")
    assert code == 2 and "hf_value_123" not in err
    assert "error: --env: HF_TOKEN looks like a secret" in err


SGLANG = load_catalog("sglang-server", "0.5.23")


@pytest.mark.parametrize(
    ("catalog", "extra", "message"),
    [
        (VLLM, "--max-model-len 4\xff", "--max-model-len needs an integer (k/m/g/t or K/M/G/T suffix), -1"),
        (VLLM, "--max-model-len 1.5K", "--max-model-len needs an integer"),  # no decimals with K
        (VLLM, "--max-num-batched-tokens 2Mi", "--max-num-batched-tokens needs an integer (k/m/g/t"),
        (VLLM, "--max-num-batched-tokens auto", "--max-num-batched-tokens needs an integer"),
        (SGLANG, "--context-length 4m", "--context-length needs an integer (k/M/G/T or Ki/Mi/Gi/Ti suffix)"),
        (SGLANG, "--context-length 2K", "--context-length needs an integer"),
    ],
)  # fmt: skip
def test_a_human_readable_int_flag_refuses_what_its_engine_refuses(
    catalog: Any, extra: str, message: str
) -> None:
    """Issue #34: these flags were typed `str` in the catalogue, so `4\\xff` passed the flag check and
    failed only in the engine's parser. Kinds as vLLM's human_readable_int[_or_auto] and SGLang's
    human_readable_int parse (vllm/utils/argparse_utils.py 0.32.0; sglang/srt/utils/common.py 0.5.23)."""
    found = [p.message for p in check_flags(catalog, split_extra_args(extra, "X"), "X")]
    assert len(found) == 1 and found[0].startswith(message), found


@pytest.mark.parametrize(
    ("catalog", "extra"),
    [
        (VLLM, "--max-model-len 32768"), (VLLM, "--max-model-len 25.6k"), (VLLM, "--max-model-len 1K"),
        (VLLM, "--max-model-len auto"), (VLLM, "--max-model-len -1"), (VLLM, "--max-num-batched-tokens 2M"),
        (VLLM, "--kv-cache-memory-bytes None"),  # optional
        (SGLANG, "--context-length 4k"), (SGLANG, "--context-length 2Ki"), (SGLANG, "--context-length 1.5M"),
    ],
)  # fmt: skip
def test_a_human_readable_int_flag_takes_what_its_engine_takes(catalog: Any, extra: str) -> None:
    assert check_flags(catalog, split_extra_args(extra, "X"), "X") == []


def test_json_nested_past_the_recursion_limit_is_a_problem() -> None:
    (found,) = problems("--kv-transfer-config " + "[" * 100_000)
    assert found == "--kv-transfer-config needs valid JSON (is nested too deeply)"


@pytest.mark.parametrize(
    "extra",
    ["--max-num-seqs lots", "--kv-cache-dtype fp9", "--enforce-eager true", "--max-num-seqs",
     "--max-num-seqs 1 2", "--max-num-seqs.x 1", "--kv-transfer-config {bad", "--max-model-len 4\xff"],
)  # fmt: skip
def test_a_value_error_does_not_suggest_llmd_allow_flags(extra: str) -> None:
    """Issue #34: LLMD_ALLOW_FLAGS lets through flags the catalogue lacks, never a known flag's bad
    value, so its hint on a value error sent the operator to a setting that cannot help."""
    (problem,) = check_flags(VLLM, split_extra_args(extra, "X"), "X")
    assert "LLMD_ALLOW_FLAGS" not in problem.line()
    assert check_flags(VLLM, split_extra_args(extra, "X"), "X", allowed={extra.split()[0]}) == [problem]


def test_an_unknown_flag_suggests_llmd_allow_flags() -> None:
    (problem,) = check_flags(VLLM, split_extra_args("--brand-new-flag 1", "X"), "X")
    assert "LLMD_ALLOW_FLAGS" in problem.line()
    assert (
        check_flags(VLLM, split_extra_args("--brand-new-flag 1", "X"), "X", allowed={"--brand-new-flag"})
        == []
    )


def test_one_argv_reader_reads_a_flag_as_the_engines_parsers_do() -> None:
    """Both spellings, `_` as `-`, every value in order (the engine keeps the last); a flag followed by
    another flag, or last, gives none; a value that merely contains the name is no match."""
    argv = [
        "vllm",
        "serve",
        "m",
        "--block_size",
        "16",
        "--enforce-eager",
        "--block-size=32",
        "--x",
        "--block-size",
    ]
    assert flag_values(argv, "--block-size") == ["16", "32"]
    assert flag_value(argv, "block_size") == "32"
    assert flag_values(argv, "--enforce-eager") == []
    assert flag_value(["--kv-transfer-config-x", "1"], "--kv-transfer-config") is None
