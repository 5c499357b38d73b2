"""Generated hostile input (env, CLI args, recipe files) through `main([...])` in-process: whatever
comes in, the launcher answers with exit 0 or 2, one line per problem, in bounded time, no traceback
and no secret echoed. 4,000 + 3,000 + 3,000 = 10,000 generated cases in total."""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.cli import main

pytestmark = pytest.mark.fuzz

SECRET = "hf_Fuzz5ecretValue9876543210"
CASE_SECONDS = 5.0
FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

# Text an env var or a real argv can carry (no NUL: execve cannot pass one), biased to the hostile.
_SPECIAL = st.sampled_from(
    ["\n", "$(x)", "`x`", "'", '"', "#", ";", "\\", " ", "=", "-", "--", "\r", "{", "}"]
)
_TEXT = st.lists(
    st.one_of(_SPECIAL, st.text(st.characters(blacklist_characters="\0", max_codepoint=0x2FFF), max_size=8)),
    max_size=6,
).map("".join)
_NUMBERISH = st.one_of(
    st.integers(-3, 70000).map(str), st.sampled_from(["", "nan", "inf", "1e400", "0x1", " 1"])
)
_VALUE = st.one_of(_TEXT, _NUMBERISH)

ENV_NAMES = [
    "LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX", "POD_IP", "POD_NAME", "POD_NAMESPACE",
    "NODE_NAME", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "LLMD_RECIPE", "LLMD_POOL", "LLMD_GPUS_PER_NODE",
    "LLMD_EXTRA_ARGS", "LLMD_EXTRA_ENV", "LLMD_RUNTIME_DIR", "LLMD_CHECK_FLAGS", "LLMD_GRACE_SECONDS",
    "LLMD_PROBE_PORT", "LLMD_LOG_FORMAT", "LLMD_CHECK_INTERVAL", "LLMD_RECIPE_FILE",
]  # fmt: skip
_GOOD = {
    "LLMD_RECIPE": st.sampled_from(["kimi-k3.1-pro", "vllm-single-pod"]),
    "LLMD_POOL": st.sampled_from(["prefill", "decode", "tpu", "mooncake-master", "mooncake-donor", "serve"]),
    "LWS_GROUP_SIZE": st.sampled_from(["1", "2", "4"]),
    "LWS_WORKER_INDEX": st.sampled_from(["0", "1", "3"]),
    "POD_IP": st.sampled_from(["10.0.0.1", "fd00::1"]),
    "LWS_LEADER_ADDRESS": st.sampled_from(["lead-0.lead.ns", "10.0.0.2"]),
    "LLMD_EXTRA_ARGS": st.sampled_from(
        [
            f"--hf-token {SECRET}",
            f"--api-ke={SECRET}",
            f"--hf-t {SECRET}",
            "--max-num-seqs 4",
            "--chat-template '$(x)\n'",
        ]
    ),
    "LLMD_EXTRA_ENV": st.sampled_from(
        ['{"A": "1"}', '{"A": "\\u0000"}', f'{{"HF_TOKEN": "{SECRET}"}}', "[1]", "{"]
    ),
    "LLMD_CHECK_FLAGS": st.sampled_from(["true", "false"]),
}
ENVS = st.lists(st.sampled_from(ENV_NAMES), max_size=8, unique=True).flatmap(
    lambda names: st.fixed_dictionaries({n: st.one_of(_VALUE, _GOOD.get(n, _VALUE)) for n in names})
)


@contextlib.contextmanager
def _environ(env: Mapping[str, str]) -> Iterator[None]:
    with mock.patch.dict(os.environ, {**env, "HF_TOKEN": SECRET}):
        yield  # read_recipe's cache stays: built-in recipes never change, each recipe case has its own path


def _check(argv: list[str], env: Mapping[str, str], codes: tuple[int, ...] = (0, 2)) -> None:
    out, err = io.StringIO(), io.StringIO()
    began = time.monotonic()
    with _environ(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: usage, then one error line
            code = exc.code if isinstance(exc.code, int) else 2
    assert time.monotonic() - began < CASE_SECONDS, argv
    text = err.getvalue()
    assert code in codes, (code, text[-2000:])
    assert SECRET not in out.getvalue() + text
    assert "Traceback" not in text
    lines = text.splitlines()
    usage = bool(lines) and lines[0].startswith("usage: ")
    for line in lines:
        if usage:  # argparse's own usage block: wrapped lines, then `PROG: error: ...`
            continue
        assert line.startswith(("llm-d-launcher: error: ", "note: ")), line


@settings(FUZZ, max_examples=4000)
@given(env=ENVS, fmt=st.sampled_from(["text", "shell", "json"]), group=st.booleans())
def test_fuzz_env(env: dict[str, str], fmt: str, group: bool) -> None:
    _check(["plan", "--format", fmt, *(["--group"] if group else [])], env)


_OPTIONS = [
    "--recipe", "--recipe-file", "--pool", "--worker-index", "--group-size", "--leader-address", "--pod-ip",
    "--gpus-per-node", "--extra-args", "--env", "--runtime-dir", "--probe-port", "--format",
]  # fmt: skip
ARGV = st.lists(
    st.one_of(
        st.sampled_from(_OPTIONS),
        st.tuples(st.sampled_from(_OPTIONS), _VALUE).map(lambda t: f"{t[0]}={t[1]}"),
    ),
    max_size=5,
).flatmap(lambda opts: st.tuples(*[st.tuples(st.just(o), _VALUE) for o in opts]))


@settings(FUZZ, max_examples=3000)
@given(
    command=st.sampled_from(["plan", "probe", "recipes", "bogus"]),
    argv=ARGV,
    extra=st.sampled_from([[], ["--group"], ["--env", f"HF_TOKEN={SECRET}"]]),
)
def test_fuzz_cli_args(command: str, argv: tuple[tuple[str, str], ...], extra: list[str]) -> None:
    if command != "plan" and "--env" in extra:  # argparse echoes an option the command does not take
        extra = []
    words = [command, *extra, *(w for pair in argv for w in pair)]
    if command == "probe":  # an exec probe must not wait on a real port: port 1 refuses at once
        words = ["probe", "live", "--port", "1", "--timeout", "0.2", *(w for pair in argv for w in pair)]
    _check(words, {}, codes=(0, 1, 2) if command == "probe" else (0, 2))  # probe: 1 = no answer


# Recipe YAML: the structure of a real recipe with generated pieces, plus hostile YAML forms.
_SCALAR = st.one_of(_VALUE, st.integers(), st.booleans(), st.none(), st.floats())
_JSONISH = st.recursive(
    _SCALAR,
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(_TEXT, kids, max_size=3)),
    max_leaves=8,
)
_HOSTILE_YAML = st.sampled_from(
    [
        "a: &a [x, x, x, x, x, x, x, x]\n"
        + "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 8)}]\n" for p, n in zip("abcde", "bcdef", strict=True)),
        "[" * 300 + "]" * 300,
        "? [a]\n: 1\n",
        "? {a: 1}\n: 1\n",
        "launcher: {1: 2, a: 3}\n",
        f'env:\n  HF_TOKEN: "{SECRET}\n',
        f"env:\n  HF_TOKEN: {SECRET}\n  HF_TOKEN: {SECRET}\n",
        "!!python/object/apply:os.system ['true']\n",
        "a: !!binary aGVsbG8=\n",
        "<<: *nope\n",
        "- just\n- a list\n",
        '"\\0"\n',
        "x: \x01\n",
        "%YAML 9.9\n---\na: 1\n",
    ]
)


@st.composite
def recipes(draw: st.DrawFn) -> str:
    import json

    if draw(st.integers(0, 4)) == 0:
        return draw(st.one_of(_HOSTILE_YAML, _TEXT))
    pool: dict[str, object] = {
        "kind": draw(st.sampled_from(["vllm", "sglang", "mooncake-master", "mooncake-donor", "x"])),
        "args": draw(
            st.dictionaries(
                st.sampled_from(["max-num-seqs", "hf-tok", "middleware", "x", "served-model-name"]),
                _JSONISH,
                max_size=3,
            )
        ),
        "env": draw(st.dictionaries(st.sampled_from(["A", "HF_TOKEN", "B-C", "1"]), _SCALAR, max_size=2)),
    }
    if draw(st.booleans()):
        pool["nodes"] = draw(_SCALAR)
    data = {
        "name": draw(st.one_of(st.just("fuzz"), _TEXT)),
        "model": {"path": draw(st.one_of(st.just("m"), _VALUE))},
        "default_pool": "p",
        "env": {"API_KEY": SECRET},
        "pools": {"p": pool},
        "launcher": draw(
            st.dictionaries(
                st.sampled_from(["extra_args", "grace_seconds", "worker_index", "x"]), _SCALAR, max_size=2
            )
        ),
    }
    text = json.dumps(data, allow_nan=True)  # JSON is YAML; NaN/Infinity are not, on purpose
    return text + draw(st.sampled_from(["", "\n", "\nextra: &x 1\nmore: *x\n", "\n  bad indent\n"]))


_CASE = itertools.count()


@settings(FUZZ, max_examples=3000)
@given(text=recipes(), fmt=st.sampled_from(["text", "shell", "json"]))
def test_fuzz_recipe_files(text: str, fmt: str) -> None:
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"llmd-fuzz-{os.getpid()}-{next(_CASE)}.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        _check(["plan", "--format", fmt, "--recipe-file", str(path)], {"POD_IP": "10.0.0.1"})
    finally:
        path.unlink(missing_ok=True)
