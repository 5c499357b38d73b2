"""A user's own one-pod recipe file, shared by the settings and recipe tests."""

from __future__ import annotations

from typing import Any

USER_RECIPE = """\
name: tiny
model: {path: /models/tiny, served_name: tiny}
default_pool: serve
launcher:
  extra_args: --max-num-seqs 4
  runtime_dir: /var/run/from-file
  gpus_per_node: 1
pools:
  serve:
    kind: vllm
    port: 9000
    args: {max-model-len: 512, enable-prefix-caching: true}
    kv_events: {port: 15557}
"""


def engine(plan: dict[str, Any]) -> dict[str, Any]:
    process: dict[str, Any] = plan["processes"][0]
    return process
