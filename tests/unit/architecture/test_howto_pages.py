"""The how-to pages executed: docs/adding-an-engine.md, docs/adding-a-watcher.md and
docs/adding-a-guide.md are followed to the letter in a copy of the repository (their code blocks are
the code written), and the tests that know every engine family, watcher and guide pass there. When a
page and the code disagree (a signature, a required field, a step left out), this fails."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"


def blocks(page: str, language: str) -> list[str]:
    """The page's fenced blocks of one language, in order, unindented (blocks inside a list item)."""
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```$", (DOCS / page).read_text(), re.M | re.S)
    return [re.sub(rf"^{indent}", "", body, flags=re.M) for indent, body in found]


def copy_repository(target: Path) -> Path:
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path.name}: the page's edit point {old!r} is gone"
    path.write_text(text.replace(old, new))


def run(copy: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, *argv], cwd=copy, env=env, capture_output=True, text=True, timeout=600
    )


def follow_adding_an_engine(copy: Path) -> None:
    pool_class, module, registry_import = blocks("adding-an-engine.md", "python")
    (catalogue,) = blocks("adding-an-engine.md", "json")
    generate, test_command = blocks("adding-an-engine.md", "sh")
    # 1. The pool class, before the Pool union, and in it.
    recipe = copy / "launcher/config/recipe.py"
    edit(recipe, "\nPool = Annotated[", f"\n{pool_class}\n\nPool = Annotated[")
    edit(recipe, ", Field(discriminator=", " | TrtllmPool, Field(discriminator=")
    # 2. The catalogue, as `catalog build` writes it (no TensorRT-LLM to read here).
    (copy / "roles/catalogs/trtllm-serve-1.2.0.json").write_text(catalogue)
    # 3. The module.
    (copy / "roles/engines/trtllm.py").write_text(module)
    # 4. The registry: its import and its entry.
    registry = copy / "roles/engines/__init__.py"
    edit(
        registry,
        "from roles.engines.vllm import VLLM\n",
        f"from roles.engines.vllm import VLLM\n{registry_import}",
    )
    text = registry.read_text()
    registry.write_text(re.sub(r"(FAMILIES[^=]*= \()", r"\1TRTLLM, ", text, count=1))
    # 5. The generated reference.
    regenerate(copy, generate, test_command)


def regenerate(copy: Path, generate: str, test_command: str) -> None:
    """The page's generate step, run; its test command must be the whole unit tier (a folder of it
    passes while the generated reference's drift fails elsewhere)."""
    assert generate.strip() == ".venv/bin/python scripts/generate_docs.py --write"
    done = run(copy, "scripts/generate_docs.py", "--write")
    assert done.returncode == 0, done.stderr[-2000:]
    assert test_command.strip() == "bash tests/check.sh && bash tests/test.sh unit", "the whole unit tier"


FAMILY_TESTS = [
    "tests/unit/roles/test_engine_registry.py",
    "tests/unit/roles/test_engine_literals.py",
    "tests/unit/config/test_recipe_schema.py",
    "tests/unit/repo/test_generated_docs.py",
    "tests/unit/architecture/test_no_import_cycles.py",
]


def test_adding_an_engine_as_the_page_says(tmp_path: Path) -> None:
    copy = copy_repository(tmp_path / "repo")
    follow_adding_an_engine(copy)
    recipe = tmp_path / "trtllm.yaml"
    recipe.write_text(
        "name: t\nmodel: {path: /models/t, served_name: t}\ndefault_pool: serve\n"
        "pools:\n  serve:\n    kind: trtllm\n    args: {tokens-per-block: 32}\n"
    )
    done = run(copy, "-m", "launcher", "plan", "--recipe-file", str(recipe), "--format", "json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"trtllm-serve"' in done.stdout and '"--tokens-per-block"' in done.stdout
    done = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *FAMILY_TESTS)
    assert done.returncode == 0, done.stdout[-4000:]


def follow_adding_a_watcher(copy: Path) -> None:
    module, factory_line, spec = blocks("adding-a-watcher.md", "python")
    generate, test_command = blocks("adding-a-watcher.md", "sh")
    # 1. The module.
    (copy / "healthchecks/heartbeat.py").write_text(module)
    # 2. The factory's line, indented as build_watchers' body.
    indented = "".join(f"    {line}" if line.strip() else line for line in factory_line.splitlines(True))
    edit(
        copy / "healthchecks/pod_watchers.py",
        "    return tuple(watchers)\n",
        f"{indented}    return tuple(watchers)\n",
    )
    # 3. Its metric, declared and listed; the reference written again.
    metrics = copy / "healthchecks/metrics.py"
    edit(metrics, "\nMETRICS = (\n", f"\n{spec}\nMETRICS = (\n    HEARTBEAT_AGE,\n")
    regenerate(copy, generate, test_command)
    # 4. The two tests that list the watchers by hand, as the page names them.
    page = (DOCS / "adding-a-watcher.md").read_text()
    factory_test = copy / "tests/unit/healthchecks/test_watchers.py"
    declared_test = copy / "tests/unit/healthchecks/test_metrics_declared.py"
    for test in (factory_test, declared_test):
        assert str(test.relative_to(copy)) in page, f"the page does not name {test.name}"
    edit(factory_test, '"store_master"\n    ]', '"store_master", "heartbeat"\n    ]')
    edit(
        declared_test,
        "    health.watchers = (\n",
        "    health.watchers = (\n        HeartbeatWatcher(1.0),\n",
    )
    edit(
        declared_test,
        "from healthchecks.forward import",
        "from healthchecks.heartbeat import HeartbeatWatcher\nfrom healthchecks.forward import",
    )


WATCHER_TESTS = [
    "tests/unit/healthchecks/test_watchers.py",
    "tests/unit/healthchecks/test_metrics_declared.py",
    "tests/unit/repo/test_generated_docs.py",
    "tests/unit/architecture/test_no_import_cycles.py",
]


def test_adding_a_watcher_as_the_page_says(tmp_path: Path) -> None:
    copy = copy_repository(tmp_path / "repo")
    follow_adding_a_watcher(copy)
    done = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", *WATCHER_TESTS)
    assert done.returncode == 0, done.stdout[-4000:]


GUIDE_TESTS = [
    "tests/unit/roles/test_golden_guides.py",
    "tests/unit/config/test_recipe.py",
    "tests/unit/config/test_builtin_recipes_compiled.py",
    "tests/unit/repo/test_generated_docs.py",
]


def test_adding_a_guide_as_the_page_says(tmp_path: Path) -> None:
    """Two files written, the generators run: the golden test plans the new guide's pod against its
    fixture (and fails, naming the word, when the fixture's differences leave one out)."""
    copy = copy_repository(tmp_path / "repo")
    recipe, fixture = blocks("adding-a-guide.md", "yaml")
    generate, test_command = blocks("adding-a-guide.md", "sh")
    name = yaml.safe_load(recipe)["name"]
    assert yaml.safe_load(fixture)["recipe"] == name
    (copy / f"launcher/config/recipes/{name}.yaml").write_text(recipe)
    (copy / f"tests/fixtures/guides/{name}.yaml").write_text(fixture)
    compile_, generate_docs = (step.strip() for step in generate.split("&&"))
    assert compile_ == ".venv/bin/python scripts/compile_recipes.py"
    assert generate_docs == ".venv/bin/python scripts/generate_docs.py --write"
    for script in (["scripts/compile_recipes.py"], ["scripts/generate_docs.py", "--write"]):
        done = run(copy, *script)
        assert done.returncode == 0, done.stderr[-2000:]
    assert name in (copy / "docs/reference/guide-differences.md").read_text()
    assert test_command.startswith("bash tests/check.sh && ") and "tests/unit/roles" in test_command
    done = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", *GUIDE_TESTS)
    assert done.returncode == 0, done.stdout[-4000:]
    plan_only = "    - port\n"
    edit(copy / f"tests/fixtures/guides/{name}.yaml", plan_only, "")
    golden = ["-k", name, "tests/unit/roles/test_golden_guides.py"]
    done = run(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", *golden)
    assert done.returncode == 1 and "--port=8000" in done.stdout, done.stdout[-4000:]


def _tool(name: str) -> str:
    """A console script of the project venv (ruff, mypy, lint-imports), beside this interpreter."""
    return str(Path(sys.executable).with_name(name))


def test_the_static_checks_and_generators_pass_with_both_pages_followed(tmp_path: Path) -> None:
    """What the pages promise in the end: with the new family and the new watcher in place, the static
    checks of the page's test command (tests/check.sh: ruff, mypy, the import contracts) pass on the
        copy, and the generators find nothing to write (the two tests above ran the copy's own tests; the
    whole unit tier in the copy took 80 s and added nothing those do not check)."""
    copy = copy_repository(tmp_path / "repo")
    follow_adding_an_engine(copy)
    follow_adding_a_watcher(copy)
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    checks = [  # the pasted blocks formatted as the editor does (a long union line, one import more)
        [_tool("ruff"), "format", "--no-cache", "."],
        [_tool("ruff"), "check", "--no-cache", "--fix", "--select", "I", "."],
        [_tool("ruff"), "check", "--no-cache", "."],
        [_tool("ruff"), "format", "--no-cache", "--check", "."],
        [_tool("mypy"), "--cache-dir", str(tmp_path / "mypy")],
        [_tool("lint-imports"), "--no-cache"],
        [sys.executable, "scripts/generate_docs.py", "--check"],
        [sys.executable, "scripts/compile_recipes.py"],
    ]
    for argv in checks:
        done = subprocess.run(argv, cwd=copy, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{argv[0]}: {(done.stdout + done.stderr)[-4000:]}"
    for compiled in (ROOT / "launcher/config/recipes").rglob("*.json"):
        assert (copy / compiled.relative_to(ROOT)).read_text() == compiled.read_text(), compiled.name
