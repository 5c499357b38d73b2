"""Secret values never leave the process: not in errors, the dry-run, the termination log or logs."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from launcher.contract.redact import REDACTED, Scrubber, secret_values
from launcher.supervise.logs import MAX_LINE, ChildOutput
from tests.conftest import Run
from tests.unit.supervise.line_reader import read_through

SECRET = "hf_s3cr3tV4lue0123456789"
HEAD = "name: x\nmodel: {path: m}\ndefault_pool: p\npools: {p: {kind: vllm}}\n"


@pytest.mark.parametrize(
    "text",
    [
        HEAD + f'env:\n  HF_TOKEN: "{SECRET}\n',  # unterminated quote
        HEAD + f"env:\n  HF_TOKEN: {SECRET}\n  HF_TOKEN: {SECRET}\n",  # duplicate key
        HEAD + f"env:\n  HF_TOKEN: {SECRET}\n  - {SECRET}\n",  # structure error on the secret's line
        HEAD + f"env: {{HF_TOKEN: {SECRET}}}}}\n",
    ],
)
def test_yaml_errors_do_not_quote_the_file(run_cli: Run, tmp_path: Path, text: str) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    code, out, err = run_cli("plan", "--recipe-file", str(path))
    assert code == 2 and "YAML" in err and SECRET not in out + err
    log = tmp_path / "termination-log"
    env = {"LLMD_TERMINATION_LOG": str(log), "LLMD_RECIPE_FILE": str(path)}
    code, out, err = run_cli("run", env=env)
    assert code == 2 and SECRET not in out + err
    assert "YAML" in log.read_text() and SECRET not in log.read_text()


@pytest.mark.parametrize(
    "extra",
    [
        f"--hf-tok {SECRET}",
        f"--api-ke={SECRET}",
        f"--hf-token.x {SECRET}",
        f"--hf-t {SECRET}",
        f"--api_key {SECRET}",
        f"--max-num-seqs 4 --api-key {SECRET} {SECRET}2",
    ],
)
@pytest.mark.parametrize("allow", ["", "--hf-tok,--api-ke,--hf-t,--api_key"])
def test_abbreviated_secret_flags_are_refused(run_cli: Run, extra: str, allow: str) -> None:
    env = {"LLMD_RECIPE": "vllm-single-pod", "LLMD_ALLOW_FLAGS": allow, "LLMD_EXTRA_ARGS": extra}
    code, out, err = run_cli("plan", env=env)
    assert code == 2 and out == "" and SECRET not in err


@pytest.mark.parametrize("pool", ["mooncake-master", "mooncake-donor"])
def test_abbreviated_secret_flags_of_a_pool_without_a_catalogue_are_refused(run_cli: Run, pool: str) -> None:
    """The Mooncake binaries have no flag catalogue: their argv is still never printed with a secret
    under an abbreviation of any engine's secret flag (found by the fuzz step: `--hf-t <secret>`)."""
    env = {"LLMD_POOL": pool, "LLMD_EXTRA_ARGS": f"--hf-t {SECRET}"}
    code, out, err = run_cli("plan", env=env)
    assert code == 2 and out == "" and SECRET not in err
    assert "--hf-t abbreviates --hf-token, a secret" in err


# Allowing an abbreviation lets no secret through.
ALLOWING = {"LLMD_ALLOW_FLAGS": "--hf-tok,--api-ke,--middleware"}


@pytest.mark.parametrize("flag", ["hf-tok", "api-ke"])
def test_abbreviated_secret_flags_in_a_recipe_are_refused(run_cli: Run, tmp_path: Path, flag: str) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(HEAD.replace("{kind: vllm}", f"{{kind: vllm, args: {{{flag}: {SECRET}}}}}"))
    code, out, err = run_cli("plan", "--recipe-file", str(path), env=ALLOWING)
    assert code == 2 and out == "" and SECRET not in err


@pytest.mark.parametrize(
    "args",
    [
        f'{{middleware: ["--hf-token", "{SECRET}"]}}',
        f'{{middleware: ["x", "--api-key={SECRET}"]}}',
        f'{{served-model-name: "--hf-token={SECRET}"}}',
        f'{{middleware: ["--hf-tok", "{SECRET}"]}}',
    ],
)
def test_secret_flags_inside_recipe_values_are_refused(run_cli: Run, tmp_path: Path, args: str) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(HEAD.replace("{kind: vllm}", f"{{kind: vllm, args: {args}}}"))
    code, out, err = run_cli("plan", "--recipe-file", str(path), env=ALLOWING)
    assert code == 2 and out == "" and SECRET not in err


def test_a_multi_line_secret_is_scrubbed_line_by_line() -> None:
    key = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\r\nAQEFAASCBKcwggSjAgEAAoIBAQ\n-----END KEY-----"
    scrub = Scrubber(secret_values({"TLS_KEY": key}))
    for line in key.splitlines():
        assert scrub(f"engine: {line} ok") == f"engine: {REDACTED} ok"
    assert REDACTED in scrub(key) and "MIIE" not in scrub(key)


@pytest.mark.parametrize("offset", [-5, -1, 0, 1])
def test_a_secret_across_the_piece_boundary_of_a_long_line_is_scrubbed(
    offset: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdout", io.StringIO())
    data = b"x" * (MAX_LINE + offset - len(SECRET) // 2) + SECRET.encode() + b"y" * 100_000 + b"\n"
    tail = read_through(data, ChildOutput(False, Scrubber([SECRET])))
    shown = "".join(tail)
    halves = SECRET[: len(SECRET) // 2], SECRET[len(SECRET) // 2 :]
    assert shown.count(REDACTED) == 1 and not any(h in shown for h in halves), "secret not scrubbed"
    expected = "x" * (MAX_LINE + offset - len(SECRET) // 2) + "y" * 100_000
    assert shown.replace(REDACTED, "") == expected, "text lost"


JSON_WITH_THE_SECRET = (
    '--kv-transfer-config \'{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both", '
    f'"kv_connector_extra_config": {{"token": "{SECRET}"}}}}\''
)


@pytest.mark.parametrize(
    ("recipe_env", "pod_env", "holder"),
    [
        ("", {"HF_TOKEN": SECRET, "LLMD_EXTRA_ARGS": JSON_WITH_THE_SECRET}, "HF_TOKEN"),
        ("", {"LLMD_EXTRA_ENV": f'{{"S3_SECRET": "{SECRET}"}}', "LLMD_EXTRA_ARGS": f"--middleware {SECRET}"},
         "S3_SECRET"),
        (f"env: {{MY_API_KEY: {SECRET}}}\n", {}, "MY_API_KEY"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("group", [False, True])
def test_a_secret_value_on_a_command_line_is_refused(
    run_cli: Run, tmp_path: Path, recipe_env: str, pod_env: dict[str, str], holder: str, group: bool
) -> None:
    """A secret's value under a flag whose name says nothing (Kubernetes expands `$(HF_TOKEN)` in
    LLMD_EXTRA_ARGS): neither printed by the dry-run nor put on a command line by `run`."""
    path = tmp_path / "recipe.yaml"
    args = "" if "LLMD_EXTRA_ARGS" in pod_env else f", args: {{chat-template: {SECRET}}}"
    path.write_text(HEAD.replace("{kind: vllm}", f"{{kind: vllm{args}}}") + recipe_env)
    code, out, err = run_cli("plan", "--recipe-file", str(path), *(["--group"] if group else []), env=pod_env)
    assert code == 2 and out == "" and SECRET not in err
    assert f"command line holds the value of {holder}" in err
    if group:
        return
    log = tmp_path / "termination-log"
    env = {**pod_env, "LLMD_TERMINATION_LOG": str(log), "LLMD_RECIPE_FILE": str(path)}
    code, out, err = run_cli("run", env=env)
    assert code == 2 and SECRET not in out + err + log.read_text()
    assert holder in log.read_text()


def test_the_same_value_under_a_plain_name_is_not_a_secret(run_cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(HEAD.replace("{kind: vllm}", f"{{kind: vllm, args: {{chat-template: {SECRET}}}}}"))
    code, out, _ = run_cli("plan", "--recipe-file", str(path), env={"CHAT_TEMPLATE": SECRET})
    assert code == 0 and SECRET in out


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--format", SECRET],
        [SECRET],
        ["probe", SECRET],
        ["local-group", "--restart-policy", SECRET],
        ["local-group", "--size", SECRET],
    ],
)
def test_a_wrong_value_that_is_a_known_secret_is_not_echoed(
    run_cli: Run, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """argparse shows a known option's wrong value; one that is the value of HF_TOKEN is hidden, as in
    every other error line."""
    with pytest.raises(SystemExit) as exit_:
        run_cli(*argv, env={"HF_TOKEN": SECRET})
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and SECRET not in err and err.startswith("llm-d-launcher: error: "), err


def test_wrong_values_of_known_options_stay_shown(run_cli: Run, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_cli("plan", "--format", "yaml", env={"HF_TOKEN": SECRET})
    assert "invalid choice: 'yaml'" in capsys.readouterr().err


def test_plan_group_names_a_secret_on_every_pods_command_line_once(run_cli: Run) -> None:
    env = {"HF_TOKEN": SECRET, "LLMD_POOL": "decode", "LLMD_EXTRA_ARGS": f"--chat-template {SECRET}"}
    code, out, err = run_cli("plan", "--group", env=env)
    assert code == 2 and out == "" and SECRET not in err
    assert err.count("command line holds the value of HF_TOKEN") == 1, err
