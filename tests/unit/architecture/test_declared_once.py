"""Facts declared once (issue #34): the LWS env names, the probe endpoints and the shutdown budget's
shares each have one declaration in launcher/contract/, which code reads and generated text states;
restating one by hand (a list of the LWS names, a probe path, "a sixth of the grace") fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from launcher.contract import lws
from launcher.contract.endpoints import PROBE_ENDPOINTS

ROOT = Path(__file__).resolve().parents[3]
CODE = sorted(p for package in ("launcher", "roles", "healthchecks") for p in (ROOT / package).rglob("*.py"))


def _constants(path: Path) -> list[tuple[ast.AST, str]]:
    """Every string constant of the module with the node holding it (a tuple, a dict, an f-string...)."""
    tree = ast.parse(path.read_text())
    return [
        (parent, child.value)
        for parent in ast.walk(tree)
        for child in ast.iter_child_nodes(parent)
        if isinstance(child, ast.Constant) and isinstance(child.value, str)
    ]


def _where(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_lws_env_names_are_listed_only_in_the_contract() -> None:
    """Single names may label a problem; a list or mapping of two or more restates the set."""
    declared = ROOT / "launcher/contract/lws.py"
    found = []
    for path in CODE:
        if path == declared:
            continue
        for parent, _ in _constants(path):
            if isinstance(parent, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
                names = [c.value for c in ast.iter_child_nodes(parent) if isinstance(c, ast.Constant)]
                if len(set(names) & set(lws.LWS_ENV)) >= 2:
                    found.append(_where(path))
    assert found == []


def test_the_probe_paths_are_written_only_in_the_contract() -> None:
    """The launcher's own (roles/engines/ names the engines' endpoints: vLLM's DP supervisor has a
    /readyz of its own)."""
    paths = {endpoint.path for endpoint in PROBE_ENDPOINTS.values()}
    declared = ROOT / "launcher/contract/endpoints.py"
    found = sorted(
        f"{_where(path)}: {value}"
        for path in CODE
        if path != declared and not _where(path).startswith("roles/engines/")
        for _, value in _constants(path)
        if value in paths
    )
    assert found == []


def test_the_probe_process_takes_paths_and_fields_from_its_snapshot() -> None:
    """It imports nothing of ours (it runs with -I -S): what it answers alone comes in the snapshot."""
    from healthchecks.probe_process import Answers

    answers = Answers(silent_after=1.0)
    renamed = {"status": 200, "body": {}, "ticking": {}, "key": "alive", "liveness": True}
    answers.take(0.0, {"phase": "serving", "answers": {"/healthy": renamed}})
    assert list(answers.paths) == ["/healthy"]
    assert answers.silence("/healthy", 5.0) == {
        "alive": False,
        "reason": "the launcher has published nothing for 5.0 s (its loop is blocked or it hangs)",
    }


SHARES = re.compile(r"\ba (sixth|tenth|quarter) of (the )?(grace|LLMD_GRACE|terminationGrace)", re.I)


def test_the_grace_shares_are_stated_only_where_declared() -> None:
    """Code says them through launcher/contract/plan.py share_words; docs link the generated
    reference (docs/reference/, scripts/generate_docs.py) instead of restating them."""
    texts = [*CODE, *sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    found = [
        _where(path)
        for path in texts
        if path != ROOT / "launcher/contract/plan.py" and SHARES.search(path.read_text())
    ]
    assert found == []
    assert "a sixth of LLMD_GRACE_SECONDS" in (ROOT / "docs/reference/settings.md").read_text()
