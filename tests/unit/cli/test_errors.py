"""Bad input: one line per problem naming the setting, exit code 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

LEADER = "kimi-prefill-0.kimi-prefill.ns"
PREFILL = {"LWS_LEADER_ADDRESS": LEADER, "LWS_GROUP_SIZE": "2", "POD_IP": "10.0.0.1"}

CASES: list[tuple[str, dict[str, str], list[str], str, str]] = [
    # (id, env, extra CLI args, setting named, words in the message)
    ("index-out-of-range", {**PREFILL, "LWS_WORKER_INDEX": "2"}, [], "LWS_WORKER_INDEX", "only 2 pods"),
    ("index-not-integer", {**PREFILL, "LWS_WORKER_INDEX": "one"}, [], "LWS_WORKER_INDEX", "integer"),
    ("index-negative", {**PREFILL, "LWS_WORKER_INDEX": "-1"}, [], "LWS_WORKER_INDEX",
     "greater than or equal"),
    ("group-size-not-integer", {**PREFILL, "LWS_GROUP_SIZE": "two"}, [], "LWS_GROUP_SIZE", "integer"),
    ("group-size-vs-recipe", {**PREFILL, "LWS_GROUP_SIZE": "3", "LWS_WORKER_INDEX": "0"}, [],
     "LWS_GROUP_SIZE", "spans 2 pods"),
    ("gpus-per-node", {**PREFILL, "LWS_WORKER_INDEX": "0", "LLMD_GPUS_PER_NODE": "8"}, [],
     "LLMD_GPUS_PER_NODE", "TP 8 x PP 1 needs 4 per pod (8 over 2 pods); for TP 8 within each pod"),
    ("gpus-per-node-decode", {"LLMD_POOL": "decode", "LLMD_GPUS_PER_NODE": "2"}, [],
     "LLMD_GPUS_PER_NODE", "TP 1 x PP 1 x 4 local DP ranks"),
    ("missing-leader", {"LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}, [], "LWS_LEADER_ADDRESS", "not set"),
    ("unknown-pool", {"LLMD_POOL": "prefil"}, [], "LLMD_POOL", "no pool 'prefil'"),
    ("unknown-recipe", {"LLMD_RECIPE": "kimi"}, [], "LLMD_RECIPE", "unknown recipe 'kimi'"),
    ("missing-recipe-file", {"LLMD_RECIPE_FILE": "/nonexistent/recipe.yaml"}, [], "LLMD_RECIPE_FILE",
     "cannot read"),
    ("tpu-worker-id", {"LLMD_POOL": "tpu", "LWS_LEADER_ADDRESS": "t-0.t", "LWS_GROUP_SIZE": "4",
                       "LWS_WORKER_INDEX": "1", "TPU_WORKER_ID": "2"}, [], "TPU_WORKER_ID", "disagree"),
    ("extra-args-owned-flag", {"LLMD_EXTRA_ARGS": "--node-rank 1"}, [], "LLMD_EXTRA_ARGS", "derived"),
    ("extra-args-secret", {"LLMD_EXTRA_ARGS": "--api-key abc"}, [], "LLMD_EXTRA_ARGS", "secret"),
    ("extra-args-secret-value", {"LLMD_EXTRA_ARGS": "--hf_token=s3cr3t-value"}, [], "LLMD_EXTRA_ARGS",
     "--hf_token would put a secret"),
    ("extra-args-dp-supervisor", {"LLMD_POOL": "decode", "LLMD_EXTRA_ARGS": "--api-server-count 4"}, [],
     "LLMD_EXTRA_ARGS", "--api-server-count is derived"),
    ("extra-args-dp-rank", {"LLMD_POOL": "decode", "LLMD_EXTRA_ARGS": "-dpn 3"}, [], "LLMD_EXTRA_ARGS",
     "-dpn is derived"),
    ("pod-ip-invalid", {"POD_IP": "10.0.0.1 x"}, [], "POD_IP", "is not an IP address (got '10.0.0.1 x')"),
    ("empty-worker-index", {**PREFILL, "LWS_WORKER_INDEX": ""}, [], "LWS_WORKER_INDEX", "integer (got '')"),
    ("missing-worker-index", PREFILL, [], "LWS_WORKER_INDEX", "is not set while other LWS"),
    ("empty-pool", {"LLMD_POOL": ""}, [], "LLMD_POOL", "no pool ''"),
    ("unresolved-kubelet-ref",
     {**PREFILL, "LWS_WORKER_INDEX": "0", "LWS_LEADER_ADDRESS": "$(LWS_LEADER_ADDRESS)"},
     [], "LWS_LEADER_ADDRESS", "neither an IP address nor a DNS name"),
    ("leader-name-then-newline",  # #40.3: a DNS name is matched whole, `$` lets a trailing newline by
     {**PREFILL, "LWS_WORKER_INDEX": "1", "LWS_LEADER_ADDRESS": "p-0.p\n"},
     [], "LWS_LEADER_ADDRESS", "neither an IP address nor a DNS name"),
    ("relative-runtime-dir", {}, ["--runtime-dir", "run"], "--runtime-dir", "not an absolute path"),
    ("tpu-hostnames", {"LLMD_POOL": "tpu", "LWS_LEADER_ADDRESS": "t-0.t", "LWS_GROUP_SIZE": "4",
                       "LWS_WORKER_INDEX": "1", "TPU_WORKER_HOSTNAMES": "t-0,t-1"}, [],
     "TPU_WORKER_HOSTNAMES",
     "lists 2 hosts but the group has 4"),
    ("extra-env-bad-name", {"LLMD_EXTRA_ENV": '{"X;touch /tmp/x;Y": "1"}'}, [], "LLMD_EXTRA_ENV",
     "is not an environment variable name"),
    ("cli-env-bad-name", {}, ["--env", "A B=1"], "--env", "is not an environment variable name"),
    ("extra-args-quotes", {"LLMD_EXTRA_ARGS": "--foo 'bar"}, [], "LLMD_EXTRA_ARGS", "quotes"),
    ("extra-env-not-json", {"LLMD_EXTRA_ENV": "A=1"}, [], "LLMD_EXTRA_ENV", "JSON"),
    ("cli-env-not-pair", {}, ["--env", "NOEQUALS"], "--env", "KEY=VALUE"),
    ("cli-index", {}, ["--worker-index", "x"], "--worker-index", "integer"),
    ("service-in-group", {"LLMD_POOL": "mooncake-master", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0",
                          "LWS_LEADER_ADDRESS": "m-0"}, [], "LWS_GROUP_SIZE",
     "one pod per service"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("env", "cli", "setting", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_exits_2_naming_the_setting(
    run_cli: Any, env: dict[str, str], cli: list[str], setting: str, words: str
) -> None:
    code, out, err = run_cli("plan", *cli, env=env)
    assert code == 2
    assert out == ""  # nothing is planned, nothing would be spawned
    lines = err.strip().splitlines()
    assert lines and all(line.startswith("llm-d-launcher: error: ") for line in lines)
    assert any(setting in line and words in line for line in lines), err
    assert "Traceback" not in err
    assert "s3cr3t-value" not in err  # a secret is named, never echoed


def test_every_problem_is_reported_at_once(run_cli: Any) -> None:
    env = {
        "LWS_LEADER_ADDRESS": LEADER,
        "LWS_GROUP_SIZE": "3",
        "LWS_WORKER_INDEX": "5",
        "LLMD_GPUS_PER_NODE": "2",
    }
    code, _, err = run_cli("plan", env=env)
    assert code == 2
    assert [s for s in ("LWS_GROUP_SIZE", "LWS_WORKER_INDEX", "LLMD_GPUS_PER_NODE") if s in err] == [
        "LWS_GROUP_SIZE", "LWS_WORKER_INDEX", "LLMD_GPUS_PER_NODE",
    ]  # fmt: skip
    assert len(err.strip().splitlines()) == 3


HEAD = "name: x\nmodel: {path: m}\ndefault_pool: p\n"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("name: x\n  bad: [", "not valid YAML"),
        ("- just\n- a list\n", "must hold a YAML mapping"),
        ("name: x\nname: y\n", "duplicate key 'name'"),
        ("name: x\nmodel: {path: m}\ndefault_pool: p\npools: {p: {kind: vllm, nodes: 0}}\n", "pools.p.nodes"),
        ("name: x\nmodel: {path: m}\ndefault_pool: q\npools: {p: {kind: vllm}}\n", "default_pool 'q'"),
        ("name: x\nmodel: {path: m}\ndefault_pool: p\npools: {p: {kind: vllm, portt: 1}}\n", "pools.p.portt"),
        ("name: x\nmodel: {path: m}\ndefault_pool: p\npools: {p: {kind: tgi}}\n", "pools.p"),
        (HEAD + "pools: {p: {kind: vllm, args: {port: 1}}}\n", "pools.p.args.port is derived"),
        (HEAD + "pools: {p: {kind: vllm, args: {tp: 2}}}\n", "pools.p.args.tp is derived"),
        (HEAD + "pools: {p: {kind: vllm, disagg_sidecar: {args: {port: 1}}}}\n", "disagg_sidecar.args.port"),
        (HEAD + "pools: {p: {kind: vllm, render: {args: {hf-token: x}}}}\n", "would put a secret"),
        (
            HEAD + "pools: {p: {kind: mooncake-master, args: {rpc_port: 1}}}\n",
            "pools.p.args.rpc_port is derived",
        ),
        (
            HEAD
            + "pools: {p: {kind: mooncake-donor, master: m, metadata_server: x, global_segment_size: 1GB, "
            "args: {api_key: k}}}\n",
            "would put a secret",
        ),
        (HEAD + "pools: {p: {kind: vllm, args: {cfg: {a: .nan}}}}\n", "NaN and infinity are not allowed"),
        (HEAD + "pools: {p: {kind: vllm, args: {x: {1: 2}}}}\n", "pools.p.args: x:"),
        (HEAD + "pools: {p: {kind: vllm, env: {A: true}}}\n", 'quoted string, e.g. A: "1"'),
        (HEAD + "pools: {p: {kind: vllm, env: {A-B: x}}}\n", "'A-B' is not an environment variable name"),
        ("name: x\nmodel: null\ndefault_pool: p\npools: {p: {kind: vllm}}\n", "model: Input should be"),
        ("name: " + "[" * 5000 + "]" * 5000 + "\n", "nests too deeply"),
        (
            "name: x\nmodel: {path: m}\ndefault_pool: p\npools: {p: {kind: vllm, args: {hf-token: t}}}\n",
            "secret",
        ),
        (
            HEAD + "pools: {p: {kind: vllm, nodes: 2, tensor_parallel: 3}}\n",
            "cannot be split evenly over 2 pods",
        ),
        (
            "name: x\nmodel: {path: m}\ndefault_pool: p\npools: {p: {kind: vllm, layout: data-parallel}}\n",
            "data_parallel_local >= 2",
        ),
        (
            HEAD + "launcher: {worker_index: 1}\npools: {p: {kind: vllm}}\n",
            "cannot set worker_index",
        ),
    ],
)
def test_invalid_recipe_file(run_cli: Any, tmp_path: Path, text: str, words: str) -> None:
    """Each mistake is one line naming the file and the path inside it; never a traceback."""
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    code, out, err = run_cli("plan", env={"LLMD_RECIPE_FILE": str(path)})
    assert code == 2 and out == ""
    assert "LLMD_RECIPE_FILE" in err and words in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("content", "words"), [(b"name: \xff\xfe\n", "is not UTF-8 text"), (None, "cannot read")]
)
def test_unreadable_recipe_file(run_cli: Any, tmp_path: Path, content: bytes | None, words: str) -> None:
    path = tmp_path / "recipe.yaml"
    if content is None:
        path.mkdir()  # a directory where the file should be
    else:
        path.write_bytes(content)
    code, _, err = run_cli("plan", env={"LLMD_RECIPE_FILE": str(path)})
    assert code == 2 and "LLMD_RECIPE_FILE" in err and words in err and "Traceback" not in err


def test_bad_value_from_the_recipe_launcher_section_names_the_recipe(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(HEAD + "launcher: {gpus_per_node: many}\npools: {p: {kind: vllm}}\n")
    code, _, err = run_cli("plan", env={"LLMD_RECIPE_FILE": str(path)})
    assert code == 2 and "recipe launcher.gpus_per_node (LLMD_GPUS_PER_NODE)" in err


def test_console_script_exit_code_and_no_traceback() -> None:
    """The installed entry point, as a pod runs it, not just main()."""
    script = Path(sys.executable).parent / "llm-d-launcher"
    env = {"PATH": "/usr/bin:/bin", "LWS_WORKER_INDEX": "abc", "LWS_GROUP_SIZE": "2"}
    proc = subprocess.run([str(script), "plan"], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("llm-d-launcher: error: LWS_WORKER_INDEX")
    assert "Traceback" not in proc.stderr


# execve(2)'s limit on one argument or env entry, NUL included (roles/group.py MAX_ARG_STRLEN).
KERNEL_LIMIT = 32 * 4096


@pytest.mark.parametrize(
    ("where", "named", "longest"),
    [
        ("args: {chat-template: BIG}", "a value of --chat-template", KERNEL_LIMIT - 1),
        ("env: {TEMPLATE: BIG}", "env TEMPLATE", KERNEL_LIMIT - len("TEMPLATE=") - 1),
    ],
)
def test_an_argument_the_kernel_would_refuse_is_bad_input(
    run_cli: Any, tmp_path: Path, where: str, named: str, longest: int
) -> None:
    """Found at the spawn it was exit 126, an image that cannot run (a crash loop in a group), naming
    neither the flag nor the variable; now `plan` and `run` name it, exit 2, the value unshown."""
    path = tmp_path / "recipe.yaml"
    for size in (longest, longest + 1):
        spec = where.replace("BIG", "y" * size)
        path.write_text(
            f"name: x\nmodel: {{path: m}}\ndefault_pool: p\npools: {{p: {{kind: vllm, {spec}}}}}\n"
        )
        code, _, err = run_cli("plan", "--recipe-file", str(path))
        assert code == (0 if size == longest else 2), err[:500]
    code, out, err = run_cli("plan", "--recipe-file", str(path), "--group")
    assert code == 2 and out == "" and "yyyyyyyy" not in err, err[:500]
    assert f"{named} of the engine process is {KERNEL_LIMIT + 1} bytes" in err
    log = tmp_path / "termination-log"
    code, out, err = run_cli("run", env={"LLMD_TERMINATION_LOG": str(log), "LLMD_RECIPE_FILE": str(path)})
    assert code == 2 and named in log.read_text() and "yyyyyyyy" not in out + err + log.read_text()
