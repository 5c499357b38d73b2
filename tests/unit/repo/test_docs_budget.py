"""Docs on a diet (issue #38): every docs page has a byte ceiling, README.md 12 KB and every other page
its size when the budget was set. A page may shrink freely; one that grows past its ceiling is cut
back, or its ceiling raised here, on purpose, in the one table. A new page needs its row."""

from __future__ import annotations

from tests.unit.repo.markdown import ROOT, doc_pages

CEILINGS = {
    "README.md": 12_000,  # the 12 KB
    "bench/README.md": 7_450,
    "deploy/README.md": 26_906,
    "images/README.md": 6_514,
    "docs/adding-a-watcher.md": 7_460,
    "docs/adding-an-engine.md": 10_118,
    "docs/fleet.md": 5_872,
    "docs/local-group.md": 5_316,
    "docs/plan-json.md": 18_381,
    "docs/preflight.md": 14_116,
    "docs/probes-and-watchers.md": 23_887,
    "docs/recipes.md": 19_030,
    "docs/reference/catalogs.md": 1_241,
    "docs/reference/exit-codes.md": 4_441,
    "docs/reference/metrics.md": 7_097,
    "docs/reference/recipe-schema.md": 13_311,
    "docs/reference/settings.md": 7_930,
    "docs/reference/shutdown-budget.md": 1_321,
    "docs/runbook-stuck-group.md": 18_932,
    "docs/running-a-pod.md": 16_085,
    "docs/settings.md": 5_461,
    "docs/testing.md": 20_151,
}


def sizes() -> dict[str, int]:
    return {str(page.relative_to(ROOT)): len(page.read_bytes()) for page in doc_pages()}


def test_every_docs_page_fits_its_ceiling() -> None:
    over = {
        page: f"{size:_} > {CEILINGS[page]:_}"
        for page, size in sizes().items()
        if size > CEILINGS.get(page, 0)
    }
    assert over == {}, "cut the page, or raise its ceiling here on purpose"


def test_every_page_has_a_ceiling_and_every_ceiling_a_page() -> None:
    assert sorted(CEILINGS) == sorted(sizes())
