"""Every link between the repository's pages leads somewhere: the file exists and, for a Markdown page,
the anchor is one of its headings (GitHub's slug rules, tests/unit/repo/markdown.py). Links to the web
are not fetched."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.repo.markdown import ROOT, anchors, doc_pages, links, slug

# Pages other changes write: a link to one passes while it is missing or still the placeholder
# (a page holding PLACEHOLDER). Whoever writes the page drops its entry here.
PENDING: dict[str, str] = {}
PLACEHOLDER = "TODO(pending)"
_WEB = ("http://", "https://", "mailto:")


def _pending(path: Path, root: Path = ROOT) -> bool:
    name = path.relative_to(root).as_posix() if path.is_relative_to(root) else ""
    return name in PENDING and (not path.is_file() or PLACEHOLDER in path.read_text())


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """One line per link of `page` that leads nowhere: `page:line: target: why`."""
    text = page.read_text()
    where = page.relative_to(root).as_posix()
    problems = []
    for link in links(text):
        if link.target.startswith(_WEB) or not link.target:
            continue
        path_part, _, anchor = link.target.partition("#")
        target = (page.parent / path_part).resolve() if path_part else page
        if _pending(target, root):
            continue
        if not target.is_relative_to(root) or not target.exists():
            problems.append(f"{where}:{link.line}: {link.target}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target.read_text()):
            problems.append(f"{where}:{link.line}: {link.target}: no heading has the anchor #{anchor}")
    return problems


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_leads_somewhere(page: Path) -> None:
    assert broken_links(page) == []


def test_the_pages_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in doc_pages()}
    assert {"README.md", "docs/running-a-pod.md", "bench/README.md", "deploy/README.md"} <= names


def test_a_written_page_is_no_longer_pending() -> None:
    written = [name for name in PENDING if not _pending(ROOT / name)]
    assert written == [], f"these pages exist now: drop them from PENDING in {Path(__file__).name}"
    if PENDING:
        pytest.skip("pending, links to them not checked: " + ", ".join(sorted(PENDING)))


README_LIMIT = 12 * 1024  # bytes: the front door; the manual lives in docs/


def test_the_readme_is_a_front_door_to_every_page() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= README_LIMIT, "README.md grew past 12 KB: move the detail into docs/"
    linked = {link.target.partition("#")[0] for link in links(readme)}
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    assert sorted(pages - linked) == []


def test_bench_readme_indexes_every_result() -> None:
    """bench/README.md links every committed result page, so none is left out of its table of goals."""
    results = sorted(p.name for p in (ROOT / "bench" / "results").glob("*.md"))
    indexed = {link.target for link in links((ROOT / "bench" / "README.md").read_text())}
    assert [name for name in results if f"results/{name}" not in indexed] == []
    assert results


def test_github_slugs() -> None:
    """The slugs GitHub gives this repository's kinds of headings."""
    assert slug("KV events (`healthchecks/kvevents.py`)") == "kv-events-healthcheckskveventspy"
    assert slug("Running a pod (`run`)") == "running-a-pod-run"
    assert slug("1. Is the pod started? `probe startup`") == "1-is-the-pod-started-probe-startup"
    assert slug("`LLMD_GRACE_SECONDS` and the [budget](x.md)") == "llmd_grace_seconds-and-the-budget"
    assert slug("Plan JSON (`--format json`)") == "plan-json---format-json"
    assert anchors('# A\n## A\n```\n# A\n```\n<a id="x"></a>\n') == {"a", "a-1", "x"}


def test_the_check_finds_dead_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: a missing file, a dead anchor (in the page and in another) and an anchor
    written inside a code span or block (not a link) are told apart; a pending page is let through."""
    monkeypatch.setitem(PENDING, "docs/reference/settings.md", "a page still to be written")
    (tmp_path / "README.md").write_text("# Top\n")
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(
        "# Here\n[ok](#here) [gone](#nowhere) [file](no-such-page.md) [other](../README.md#nope)\n"
        "[fine](../README.md#top) `[code](#nowhere)`\n```\n[block](#nowhere)\n```\n"
        "[pending](reference/settings.md#anything) [web](https://example.com/#x)\n"
    )
    assert broken_links(page, tmp_path) == [
        "docs/page.md:2: #nowhere: no heading has the anchor #nowhere",
        "docs/page.md:2: no-such-page.md: no such file",
        "docs/page.md:2: ../README.md#nope: no heading has the anchor #nope",
    ]
