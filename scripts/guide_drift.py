"""What changed upstream in the guides the recipes follow: re-reads each guide fixture's pod source file
(tests/fixtures/guides/*.yaml, `sources:` and each pod's `source`) in an llm-d/llm-d checkout and prints,
one line per fact, where the file now differs from what the fixture pinned: the DisaggregatedSet's
slices, the pod's replicas, its container's command, args (or bash script), env and resources, and the
routing sidecar's args. Prints nothing when the checkout matches the pins; exits 1 when it does not.

    python scripts/guide_drift.py ~/src/llm-d            # a checkout at the commit to bump to
    python scripts/guide_drift.py                        # the stored copies (tests/fixtures/guides/upstream)

How to bump a guide with it: docs/adding-a-guide.md.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "guides"
STORED = FIXTURES / "upstream"
SIDECAR = "routing-proxy"
POD_IP = "$(POD_IP)"  # how a fixture writes a status.podIP fieldRef


def env_facts(entries: list[dict[str, Any]]) -> dict[str, str]:
    """A container's env as name -> value, a downward-API field or a Secret's key, one string each."""
    out: dict[str, str] = {}
    for entry in entries:
        source = entry.get("valueFrom", {})
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            out[entry["name"]] = f"secret {ref['name']}/{ref['key']}"
        elif "fieldRef" in source:
            out[entry["name"]] = f"field {source['fieldRef']['fieldPath']}"
        else:
            out[entry["name"]] = str(entry.get("value", ""))
    return out


def pinned_env(pod: dict[str, Any]) -> dict[str, str]:
    """The same for a fixture pod (its `env`, `env_from_field` and `env_from_secret`)."""
    out = {k: "field status.podIP" if v == POD_IP else str(v) for k, v in pod.get("env", {}).items()}
    out |= {k: f"field {v}" for k, v in pod.get("env_from_field", {}).items()}
    out |= {k: f"secret {v['name']}/{v['key']}" for k, v in pod.get("env_from_secret", {}).items()}
    return out


def strings(value: Any) -> Any:
    """Resource quantities compared as text: `1` and `'1'` are one quantity."""
    if isinstance(value, dict):
        return {k: strings(v) for k, v in value.items()}
    return str(value)


def upstream_pod(doc: dict[str, Any], pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The pod spec and the spec holding its replicas, for a Deployment (patch) or a DisaggregatedSet
    role; None when the file no longer has that role."""
    spec = doc.get("spec", {})
    if pod["kind"] != "DisaggregatedSet":
        return spec.get("template", {}).get("spec", {}), spec
    roles = [r["spec"] for r in spec.get("roles", []) if r.get("name") == pod["pool"]]
    return (roles[0]["leaderWorkerTemplate"]["workerTemplate"]["spec"], roles[0]) if roles else None


def changes(
    pod: dict[str, Any], spec: dict[str, Any], owner: dict[str, Any]
) -> Iterator[tuple[str, Any, Any]]:
    """Each fact of one fixture pod as (field, pinned, upstream)."""
    main: dict[str, Any] = next(iter(spec.get("containers", [])), {})  # the engine's (the sidecar is an init)
    if "command" in main:  # an overlay's patch may leave it (and the resources) to its base
        yield "command", pod.get("command"), main["command"]
    if "shell" in pod:
        yield "script", pod["shell"].rstrip("\n"), "".join(main.get("args", [])).rstrip("\n")
    else:
        yield "args", pod.get("args", []), main.get("args", [])
    yield "env", pinned_env(pod), env_facts(main.get("env", []))
    if "resources" in main:
        yield "resources", strings(pod.get("resources", {})), strings(main["resources"])
    if "replicas" in owner:
        yield "replicas", pod.get("replicas", 1), owner["replicas"]
    sidecars = [c["args"] for c in spec.get("initContainers", []) if c.get("name") == SIDECAR]
    if sidecars or "sidecar" in pod:
        yield "sidecar args", pod.get("sidecar", {}).get("args"), sidecars[0] if sidecars else None


def difference(pinned: Any, now: Any) -> str:
    """A changed fact in a line: the words removed and added (lists, mappings, scripts) or both values."""
    if isinstance(pinned, dict) and isinstance(now, dict):
        gone = [f"{k}={pinned[k]}" for k in pinned if pinned[k] != now.get(k, object())]
        new = [f"{k}={now[k]}" for k in now if now[k] != pinned.get(k, object())]
        return f"- {gone} + {new}"
    if isinstance(pinned, str) and isinstance(now, str):
        pinned, now = pinned.splitlines(), now.splitlines()
    if isinstance(pinned, list) and isinstance(now, list):
        diff = [d for d in difflib.ndiff([str(x) for x in pinned], [str(x) for x in now]) if d[:1] in "-+"]
        return " ".join(diff)
    return f"pinned {pinned!r}, upstream {now!r}"


def drift(checkout: Path, fixture: Path) -> Iterator[str]:
    """Every change between one fixture's pins and its pod source files in the checkout."""
    data = yaml.safe_load(fixture.read_text())
    for path in dict.fromkeys(data["sources"][pod["source"]]["path"] for pod in data["pods"].values()):
        where = f"{data['recipe']}: {path}: "
        try:
            docs = [d for d in yaml.safe_load_all((checkout / path).read_text()) if isinstance(d, dict)]
        except (OSError, yaml.YAMLError) as error:
            yield f"{where}not read from {checkout}: {type(error).__name__}"
            continue
        for name, pod in data["pods"].items():
            if data["sources"][pod["source"]]["path"] != path:
                continue
            doc = next((d for d in docs if d.get("kind") == pod["kind"]), {})
            found = upstream_pod(doc, pod)
            if found is None or not doc:
                yield f"{where}{name}: no {pod['kind']} {pod['pool']} in the file"
                continue
            yield from (
                f"{where}{name}: {field}: {difference(pinned, now)}"
                for field, pinned, now in changes(pod, *found)
                if pinned != now
            )
        for doc in (d for d in docs if d.get("kind") == "DisaggregatedSet"):
            pinned, now = data.get("slices", 1), doc.get("spec", {}).get("slices", 1)  # the CRD's default
            if pinned != now:
                yield f"{where}slices: {difference(pinned, now)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", nargs="?", type=Path, default=STORED, help="an llm-d/llm-d checkout")
    parser.add_argument("--recipe", action="append", default=[], help="only this guide recipe (repeatable)")
    args = parser.parse_args(argv)
    fixtures = sorted(FIXTURES.glob("*.yaml"))
    if args.recipe:
        fixtures = [f for f in fixtures if f.stem in args.recipe]
    lines = [line for fixture in fixtures for line in drift(args.checkout, fixture)]
    for line in lines:
        print(line)
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
