"""Every command example in the docs still runs. An example is a ```console block:

    $ LWS_GROUP_SIZE=2 llm-d-launcher plan --group      <- a command (env assignments, then argv)
    ...output...                                        <- what it prints (stdout and stderr)
    $ echo $?                                           <- optional: the next line is its exit code
    1

The output shown must be what the command prints, line for line, where a line `...` stands for any
number of lines and a line ending in `...` for any line that starts with the text before it. A
command without `echo $?` must exit 0. Only commands without side effects may be examples: `plan`,
`recipes`, `probe` and `--help`; `run` and `local-group` belong in ```sh blocks, which are not run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.unit.repo.markdown import ROOT, Example, doc_pages, examples, parse_console

_ELIDED = "..."
_POD_ENV = ("LWS_", "LLMD_", "POD_", "TPU_", "NODE_NAME")


def matches(shown: list[str], actual: list[str]) -> bool:
    """`shown` equals `actual` line for line, `...` lines standing for any lines and a line ending in
    `...` for any line with that prefix."""
    if not shown:
        return not actual
    head, rest = shown[0], shown[1:]
    if head == _ELIDED:
        return any(matches(rest, actual[skip:]) for skip in range(len(actual) + 1))
    if not actual:
        return False
    fits = actual[0].startswith(head[: -len(_ELIDED)]) if head.endswith(_ELIDED) else actual[0] == head
    return fits and matches(rest, actual[1:])


def run(example: Example) -> tuple[int, list[str]]:
    """The command as a reader would run it: a fresh process, this checkout, no pod env."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_POD_ENV)}
    env.update(COLUMNS="100", **example.env)
    proc = subprocess.run(
        [sys.executable, "-m", "launcher", *example.argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
        check=False,
    )
    return proc.returncode, proc.stdout.splitlines()


ALL = [example for page in doc_pages() for example in examples(page)]


@pytest.mark.parametrize("example", ALL, ids=[f"{e.where} {' '.join(e.argv)}" for e in ALL])
def test_the_example_runs_as_shown(example: Example) -> None:
    code, output = run(example)
    assert code == example.exit_code, "\n".join(output)
    assert matches(example.output, output), "\n".join(output)


def test_the_docs_have_examples_of_each_command() -> None:
    assert {e.argv[0] for e in ALL} >= {"plan", "recipes", "probe"}
    assert any(e.exit_code != 0 for e in ALL) and any("--group" in e.argv for e in ALL)


def test_the_parser_and_the_matcher() -> None:
    """Negative controls: a wrong exit code, a wrong line, a missing line and a side-effect command
    are each caught."""
    body = ["$ A=1 llm-d-launcher probe live \\", "  --port 1", "out: x", "$ echo $?", "1"]
    (example,) = parse_console(body, "p:1")
    assert example == Example("p:1", {"A": "1"}, ["probe", "live", "--port", "1"], ["out: x"], 1)
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"]) and matches(["a..."], ["abc"])
    assert not matches(["a", "...", "d"], ["a", "b", "c"]) and not matches(["ab"], ["abc"])
    assert not matches(["a"], ["a", "b"]) and not matches(["a", "b"], ["a"])
    with pytest.raises(AssertionError, match="side effects"):
        parse_console(["$ llm-d-launcher run"], "p:1")
    with pytest.raises(AssertionError, match="only llm-d-launcher"):
        parse_console(["$ rm -rf /tmp/x"], "p:1")
    wrong = Example("p:1", {}, ["recipes"], [], 0)
    code, output = run(wrong)
    assert code == 0 and not matches(wrong.output, output)  # the recipes list is not empty
