"""Error lines: one line, the right setting named, no value that could be a secret echoed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from launcher import cli
from launcher.contract.errors import ConfigError
from launcher.contract.plan import ShutdownBudget
from tests.conftest import Run


def test_a_refused_termination_log_is_not_written(
    run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("run", env={"LLMD_TERMINATION_LOG": "termination.log"})
    assert code == 2 and "LLMD_TERMINATION_LOG: is not an absolute path" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [(), ("--recipe-file", "")])
def test_an_empty_recipe_file_is_named_as_such(run_cli: Run, argv: tuple[str, ...]) -> None:
    env = {} if argv else {"LLMD_RECIPE_FILE": ""}
    code, _, err = run_cli("plan", *argv, env=env)
    assert code == 2 and err.startswith("llm-d-launcher: error: LLMD_RECIPE_FILE: cannot read ''"), err


def test_a_newline_in_a_value_keeps_the_error_on_one_line(
    run_cli: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(_: object) -> int:
        raise ConfigError.one("model.path", "/models/a\nb\rc does not exist", "mount it")

    monkeypatch.setattr(cli, "_cmd_plan", fails)
    code, _, err = run_cli("plan")
    assert (
        code == 2 and err == "llm-d-launcher: error: model.path: /models/a\\nb\\rc does not exist; mount it\n"
    )


def test_an_extra_env_name_keeps_its_case(run_cli: Run) -> None:
    code, _, err = run_cli("plan", env={"LLMD_EXTRA_ENV": '{"My_Var": {"a": 1}}'})
    assert code == 2 and "(--env): My_Var: give the value" in err, err


def test_a_secret_value_in_another_setting_is_scrubbed(run_cli: Run) -> None:
    secret = "bad secret!"
    env = {"HF_TOKEN": secret, "LWS_LEADER_ADDRESS": secret, "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0"}
    code, _, err = run_cli("plan", env=env)
    assert code == 2 and "LWS_LEADER_ADDRESS" in err and secret not in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["recipes", "--env", "HF_TOKEN=s3cr3tv4lue"],
        ["recipes", "s3cr3tv4lue"],
        ["plan", "--format", "s3cr3tv4lue"],
        ["probe", "live", "--port", "s3cr3tv4lue"],
    ],
)
def test_argparse_errors_are_one_line_without_values(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "error:" in err, err
    assert argv[0] != "recipes" or "s3cr3tv4lue" not in err, err  # an unknown argument's value


def test_a_wrong_typed_list_in_the_recipe_is_not_echoed(run_cli: Run, tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: x\nmodel: {path: /m}\ndefault_pool: p\npools:\n  p: {kind: vllm, port: 1}\n"
        "launcher:\n  extra_args: [--hf-token, s3cr3tv4lue]\n"
    )
    code, _, err = run_cli("plan", env={"LLMD_RECIPE_FILE": str(recipe)})
    assert code == 2 and "extra_args" in err and "s3cr3tv4lue" not in err, err


@pytest.mark.parametrize("grace", range(1, 10))
def test_a_short_grace_leaves_the_engine_most_of_it(grace: int) -> None:
    budget: Any = ShutdownBudget.from_grace(grace)
    assert budget.engine_deadline >= 0.75 * grace, budget
    assert 0 < budget.engine_deadline < budget.kill_at < grace


@pytest.mark.parametrize("brk", ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"])
def test_every_line_break_in_a_value_keeps_the_error_on_one_line(run_cli: Run, brk: str) -> None:
    """str.splitlines (and many log readers) break lines on these as well; the generated-input step
    found one in an unknown flag's name (LLMD_EXTRA_ARGS='-\\x1e')."""
    code, _, err = run_cli("plan", env={"LLMD_EXTRA_ARGS": f"-{brk}"})
    assert code == 2 and len(err.splitlines()) == 1, repr(err)
    assert err.startswith("llm-d-launcher: error: ") and brk not in err


@pytest.mark.parametrize("setting", ["LLMD_EXTRA_ARGS", "LLMD_RUNTIME_DIR"])
def test_a_huge_value_echoed_leaves_the_fix_in_sight(run_cli: Run, tmp_path: Path, setting: str) -> None:
    """A 100 KB value was echoed whole: the fix ended 100 KB along the line, and out of the 4 KiB
    termination message. The message is cut in its middle; the setting and the fix stay."""
    fixes = {"LLMD_EXTRA_ARGS": "give flags such as --max-num-seqs 64", "LLMD_RUNTIME_DIR": "absolute"}
    env = {setting: "a" * 100_000}
    code, _, err = run_cli("plan", env=env)
    assert code == 2 and len(err) < 1000 and err.startswith(f"llm-d-launcher: error: {setting}"), err[:300]
    assert fixes[setting] in err.splitlines()[0][-100:] and "characters not shown" in err
    log = tmp_path / "termination-log"
    code, _, _ = run_cli("run", env={**env, "LLMD_TERMINATION_LOG": str(log)})
    assert code == 2 and fixes[setting] in log.read_text()


@pytest.mark.parametrize("at", range(262, 300, 4))  # the secret starts 13 characters later
def test_the_cut_never_leaves_part_of_a_secret(run_cli: Run, at: int) -> None:
    """Known secrets are hidden before the cut: one that straddles it is not shown in part."""
    secret = "hf_CutSecretValue0123456789"
    code, _, err = run_cli(
        "plan", env={"HF_TOKEN": secret, "LLMD_EXTRA_ARGS": "a" * at + secret + "b" * 100_000}
    )
    assert code == 2 and "characters not shown" in err
    assert not any(secret[i : i + 6] in err for i in range(len(secret) - 5)), err
