"""The repository's Markdown pages as the docs tests read them: which pages there are, their fenced
blocks, their headings' anchors (GitHub's rules), their links and their command examples (```console
blocks, tests/unit/repo/test_docs_examples.py). No Markdown library: the pages use a small subset,
and the rules below are the ones GitHub applies to it."""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_FRONT_PAGES = ("README.md", "bench/README.md", "deploy/README.md", "images/README.md")


def doc_pages() -> list[Path]:
    """README.md, every page under docs/ and the folder READMEs that sit beside code."""
    return [ROOT / name for name in _FRONT_PAGES] + sorted((ROOT / "docs").rglob("*.md"))


@dataclass(frozen=True)
class Fence:
    info: str  # the word after the opening fence: "console", "sh", "" ...
    line: int  # 1-based line of the opening fence
    body: list[str]


_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")


def split_fences(text: str) -> tuple[list[str], list[Fence]]:
    """The page's prose lines (fenced lines blanked, so line numbers stay) and its fenced blocks."""
    prose: list[str] = []
    fences: list[Fence] = []
    opening: tuple[str, Fence] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if opening is None and match:
            opening = (match[2], Fence(match[3].strip().split(" ")[0], number, []))
            prose.append("")
        elif opening is not None:
            marker, fence = opening
            if match and match[2].startswith(marker) and not match[3].strip():
                fences.append(fence)
                opening = None
            else:
                fence.body.append(line)
            prose.append("")
        else:
            prose.append(line)
    assert opening is None, f"a fence opened on line {opening[1].line} is never closed"
    return prose, fences


_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ID = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")
_INLINE_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]*)(?:\s+\"[^\"]*\")?\)")
_REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)")


_WORD_CATEGORIES = {"Lu", "Ll", "Lt", "Lm", "Lo", "Nd", "Nl", "No", "Mn"}  # letters, digits, marks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: Markdown removed, lower case, every character that is
    not a letter, digit, underscore, space or hyphen dropped, spaces turned into hyphens."""
    text = _INLINE_LINK.sub(r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    kept = "".join(ch for ch in text if ch in " -_" or unicodedata.category(ch) in _WORD_CATEGORIES)
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a page offers: its headings' slugs (a repeated slug gets -1, -2, ...) and HTML ids."""
    prose, _ = split_fences(text)
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose:
        found.update(_HTML_ID.findall(line))
        heading = _HEADING.match(line)
        if heading:
            base = slug(heading[2])
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


@dataclass(frozen=True)
class Link:
    line: int
    target: str  # as written: "docs/x.md#anchor", "#anchor", "../deploy/"


def links(text: str) -> Iterator[Link]:
    """The page's links outside code: inline `[text](target)` and reference definitions."""
    prose, _ = split_fences(text)
    for number, line in enumerate(prose, 1):
        without_code = re.sub(r"(`+).*?\1", "", line)
        for match in _INLINE_LINK.finditer(without_code):
            yield Link(number, match[2])
        definition = _REFERENCE_DEF.match(without_code)
        if definition:
            yield Link(number, definition[1])


SIDE_EFFECT_FREE = ("plan", "recipes", "probe")  # the commands an example may run (and --help)


@dataclass(frozen=True)
class Example:
    """One `$ llm-d-launcher ...` line of a ```console block, what it prints and its exit code."""

    where: str  # page:line
    env: dict[str, str]
    argv: list[str]  # after `llm-d-launcher`
    output: list[str]
    exit_code: int


def examples(page: Path) -> list[Example]:
    """The command examples of one page, in order."""
    _, fences = split_fences(page.read_text())
    found: list[Example] = []
    for fence in fences:
        if fence.info == "console":
            found.extend(parse_console(fence.body, f"{page.relative_to(ROOT).as_posix()}:{fence.line}"))
    return found


def parse_console(body: list[str], where: str) -> list[Example]:
    """A console block's commands (`\\` continues a line), their output and `echo $?` codes; a command
    other than a side-effect-free llm-d-launcher one is refused, since the test would run it."""
    commands: list[tuple[str, list[str]]] = []  # (command line, output lines)
    lines = iter(body)
    for line in lines:
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\"):
                command = command[:-1].rstrip() + " " + next(lines).strip()
            commands.append((command, []))
        elif commands:
            commands[-1][1].append(line)
        else:
            raise AssertionError(f"{where}: a console block starts with `$ command`, not {line!r}")
    parsed: list[Example] = []
    for command, output in commands:
        if command.strip() == "echo $?":
            assert parsed and len(output) == 1 and output[0].isdigit(), f"{where}: `echo $?` needs a code"
            parsed[-1] = replace(parsed[-1], exit_code=int(output[0]))
            continue
        words = shlex.split(command)
        env = dict(word.split("=", 1) for word in _leading_assignments(words))
        argv = words[len(env) :]
        assert argv[:1] == ["llm-d-launcher"], f"{where}: only llm-d-launcher commands are run: {command}"
        assert argv[1] in SIDE_EFFECT_FREE or "--help" in argv, (
            f"{where}: `{command}` has side effects; show it in a ```sh block, which is not run"
        )
        parsed.append(Example(where, env, argv[1:], output, 0))
    return parsed


def _leading_assignments(words: list[str]) -> list[str]:
    taken = []
    for word in words:
        name, sep, _ = word.partition("=")
        if not sep or not name.isidentifier():
            break
        taken.append(word)
    return taken
