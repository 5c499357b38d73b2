"""`--help` is what a platform engineer reads first: every command says what it does, every argument
what it is, every option that has a default names it, and the exec probe names every code it exits with."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from healthchecks.probe import probe

SHOWN_DEFAULTLESS: tuple[object, ...] = (None, False, [], argparse.SUPPRESS)  # nothing a person would type


def _commands() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command and action parser, by its name on the command line, its deferred arguments added."""
    from launcher.cli import _parser

    pending = [("llm-d-launcher", _parser(None))]
    while pending:
        name, parser = pending.pop()
        parser.format_help()  # adds the arguments a command defers to its first use
        yield name, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending += [(f"{name} {word}", sub) for word, sub in action.choices.items()]


COMMANDS = dict(_commands())


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_says_what_it_does(name: str) -> None:
    assert (COMMANDS[name].description or "").strip(), f"`{name} --help` does not say what it does"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_argument_is_explained_and_names_its_default(name: str) -> None:
    for action in COMMANDS[name]._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        shown = "/".join(action.option_strings) or action.dest
        assert action.help, f"`{name} --help`: {shown} is not explained"
        if action.default not in SHOWN_DEFAULTLESS and not action.required:
            assert "default" in action.help, f"`{name} --help`: {shown} does not name its default"


def test_the_probe_help_names_every_code_it_exits_with() -> None:
    """The kubelet only sees non-zero, but a person scripting the probe reads its --help."""
    refused = probe("live", port=1, timeout=0.5)  # nothing listens on port 1
    bad_timeout = probe("live", port=1, timeout=0)
    assert (refused, bad_timeout) == (1, 2)
    description = COMMANDS["llm-d-launcher probe"].description or ""
    for code in (0, refused, bad_timeout):
        assert re.search(rf"\b{code}\b", description), f"`probe --help` does not name exit {code}"
