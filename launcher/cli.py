"""`llm-d-launcher`: the pod ENTRYPOINT's command line. `plan` is the dry-run."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO, TypeAlias

import launcher.early  # noqa: F401 - first: `run`'s signal handlers before any heavy import
from launcher.config.defaults import PROBE_PORT
from launcher.contract.endpoints import PROBE_ENDPOINTS
from launcher.contract.errors import ConfigError, Problem
from launcher.contract.redact import REDACTED, Scrubber, is_secret_name, secret_values
from launcher.stderr import say, silence

_SETTINGS = "settings (CLI flags override env; env overrides the recipe's `launcher:` section):"
_SECRETS = (
    "secrets (names with TOKEN, SECRET, PASSWORD, KEY, ...) are shown as <redacted>, never put on argv."
)


def _epilog(command: str) -> str:
    """The settings part comes from their declarations (launcher/config/settings.py), the exit codes
    from the exit-code table (launcher/contract/exits.py)."""
    from launcher.config.settings import settings_help
    from launcher.contract.exits import BAD_INPUT, OK

    exits = f"exit codes: {OK.code} ok, {BAD_INPUT.code} bad input (one line per problem, nothing spawned)."
    text = f"{_SETTINGS}\n{settings_help('pod', 'plan')}\n{_SECRETS}\n{exits}"
    if command == "run":
        text += f"\nrun settings:\n{settings_help('run')}\n{_run_exits()}"
    return text


def _run_exits(width: int = 100) -> str:
    """Every code `run` can end with, one wrapped line each, from the exit-code table."""
    import textwrap

    from launcher.contract.exits import EXIT_CODES

    wide = max(len(e.code) for e in EXIT_CODES)
    lines = ["run exit codes (the reason for a non-zero exit goes to LLMD_TERMINATION_LOG):"]
    for exit_code in EXIT_CODES:
        head = f"  {exit_code.code:<{wide}}  "
        text = (
            f"{exit_code.meaning}. In an LWS group: {exit_code.in_group}. A fresh group fixes it: "
            f"{exit_code.fresh_group_fixes}."
        )
        lines.append(textwrap.fill(text, width, initial_indent=head, subsequent_indent=" " * len(head)))
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """A parser that takes the settings' flags and help from their declarations on first use: only
    `plan`, `run` and --help need them, and the exec probe (forked by the kubelet every period) must
    not pay for importing pydantic. Likewise `deferred` adds a command's own arguments on first use,
    so no command imports another's module."""

    def __init__(
        self,
        *args: Any,
        settings_for: str | None = None,
        deferred: Callable[[argparse.ArgumentParser], None] | None = None,
        **kwargs: Any,
    ) -> None:
        # No abbreviations: `plan --pod x` must not become --pod-ip, nor `--group` --group-size (the
        # same reason engine flags are checked against their full names).
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self._settings_for = settings_for  # None, "root", "plan" or "run"
        self._flags_added = False
        self._deferred = deferred

    def error(self, message: str) -> NoReturn:
        """One line, exit 2, and no value echoed: a mistyped flag may carry a token. A value shown
        (a known option's wrong value) is scrubbed of the env's secrets, as every other error line."""
        scrub = Scrubber(secret_values(os.environ))
        say(scrub(f"llm-d-launcher: error: {_without_values(message)}; see {self.prog} --help"))
        self.exit(2)

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:
        self._add_setting_flags()
        return super().parse_known_args(*args, **kwargs)

    def format_help(self) -> str:
        self._add_setting_flags()
        if self._settings_for:
            self.epilog = _epilog(self._settings_for)
        return super().format_help()

    def _add_setting_flags(self) -> None:
        add_arguments, self._deferred = self._deferred, None
        if add_arguments is not None:
            add_arguments(self)
        if self._settings_for not in ("plan", "run") or self._flags_added:
            return
        from launcher.config.settings import CLI_FLAGS, DOCS, env_name

        self._flags_added = True
        pod = self.add_argument_group("pod and recipe (override the env)")
        for field, flag in CLI_FLAGS.items():
            repeated = field == "extra_env"  # --env KEY=VALUE, once per variable
            pod.add_argument(
                flag,
                metavar=DOCS[field].metavar,
                dest=field,
                action="append" if repeated else "store",
                help=f"{env_name(field)} (repeatable)" if repeated else env_name(field),
            )


def _without_values(message: str) -> str:
    """argparse's message on one line, unknown arguments by option name only (a mistyped flag may
    carry a token); a wrong value of a known option is shown, as the person needs to see it."""
    head, sep, rest = message.partition("unrecognized arguments: ")
    if sep:
        names = [t.split("=", 1)[0] for t in rest.split() if t.startswith("-")]
        return f"{head}unrecognized arguments: {' '.join(names) or REDACTED} (values not shown)"
    # `recipes`' action word is where a stray value lands (`recipes --env KEY=VALUE`): not shown.
    message = re.sub(_POSITIONAL_CHOICE, r"\1invalid choice (value not shown)", message)
    return " ".join(message.split())


# argparse: "argument ACTION: invalid choice: 'x' (choose from 'a', 'b')"; the value may hold anything,
# even that parenthesis, so everything up to the last one goes.
# Compiled on first use (re's cache): only a mistyped action needs it.
_POSITIONAL_CHOICE = r"(?s)(argument ACTION: )invalid choice: .*(?= \(choose from [^(]*$)"


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line. `command`, the word the arguments start with when it names a command:
    only that command's parser is built, as it is the only one argparse will use (the eleven parsers
    cost `plan` 2 ms); None (help, a root flag, a mistyped command) builds every one."""
    root = _Parser(
        prog="llm-d-launcher",
        description="The ENTRYPOINT of llm-d model-server pods: from the pod's LWS env and a recipe it "
        "derives the pod's role and builds the exact engine commands, env and files.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        settings_for="root",
    )
    root.add_argument(
        "--version",
        action=_VersionAction,
        help="the launcher's, the built-in recipes' and the engine catalogues' versions",
    )
    sub = root.add_subparsers(dest="command", metavar="COMMAND")
    for name, add_command in _COMMANDS.items():
        if command in (None, name):
            add_command(sub)
    return root


# What add_subparsers returns (argparse names no public type for it).
_Commands: TypeAlias = "argparse._SubParsersAction[_Parser]"


def _add_plan(sub: _Commands) -> None:
    plan = sub.add_parser(
        "plan",
        help="dry-run: print what this pod (or its whole LWS group) would run, spawn nothing",
        description="Print the exact commands, env and files this pod would run, and spawn nothing.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        settings_for="plan",
    )
    plan.add_argument(
        "--format",
        choices=("text", "shell", "json"),
        default="text",
        help="text: readable (the default); shell: copy-pasteable sh script; json: stable schema "
        "llm-d-launcher/plan/v2 (group: llm-d-launcher/group/v2)",
    )
    plan.add_argument(
        "--group", action="store_true", help="plan every pod of the LWS group and check the group as a whole"
    )
    plan.add_argument(
        "--model-config",
        metavar="FILE",
        help="the model's config.json: refuse what it rules out (attention heads vs TP, the context "
        "vs max_position_embeddings)",
    )
    plan.add_argument(
        "--engine-version",
        metavar="X.Y.Z",
        help="check the flags against this engine release's catalogue (default: the newest one the "
        "pool's engine_versions admits, else the image's or the built-in default)",
    )


def _add_run(sub: _Commands) -> None:
    sub.add_parser(
        "run",
        help="the pod's ENTRYPOINT: preflight, then run and supervise the engine and its sidecars",
        description="Resolve the leader, check the pod (model path, binaries, ports, files), clean stale "
        "/dev/shm files, then run the plan's processes as PID 1: the engine is critical (its exit ends "
        "the pod with its exit code), sidecars restart with bounded backoff. SIGTERM drains the engine "
        "within LLMD_GRACE_SECONDS.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        settings_for="run",
    )


def _add_recipes(sub: _Commands) -> None:
    recipes = sub.add_parser(
        "recipes",
        help="the built-in recipes: list them, show one to copy, or print the recipe JSON Schema",
        description="Without an action: list the built-in recipes and their pools.",
    )
    recipe_actions = recipes.add_subparsers(dest="recipes_action", metavar="ACTION")
    listing = "list the built-in recipes and their pools (the default)"
    recipe_actions.add_parser("list", help=listing, description=listing)
    showing = "print a built-in recipe's YAML, to copy and edit"
    show = recipe_actions.add_parser("show", help=showing, description=showing)
    show.add_argument("name", metavar="NAME", help="a built-in recipe (`llm-d-launcher recipes` lists them)")
    show.add_argument(
        "--capabilities",
        action="store_true",
        help="print each pool's capabilities in llm-d's requirements.modelServer.capabilities shape",
    )
    schema = (
        "print the recipe JSON Schema; save it and start a recipe with "
        "`# yaml-language-server: $schema=recipe.schema.json` so editors validate it"
    )
    recipe_actions.add_parser("schema", help=schema, description=schema)


def _add_version(sub: _Commands) -> None:
    sub.add_parser(
        "version",
        help="the launcher's, the built-in recipes' and the engine catalogues' versions",
        description="Print the launcher's version, each built-in recipe's sha256 digest (recipes carry "
        "no version) and the engine release each built-in flag catalogue was generated from.",
    )


def _add_catalog(sub: _Commands) -> None:
    catalog = sub.add_parser(
        "catalog",
        help="flag catalogues: build one from the engine installed (the images do, at build time)",
        description="Flag catalogues: the engine flags, choices and types `plan` and `run` check argv "
        "against, generated from the engine's own parser. `build` writes one for the engine installed.",
    )
    catalog_actions = catalog.add_subparsers(dest="catalog_action", metavar="ACTION", required=True)
    build = catalog_actions.add_parser(
        "build",
        help="read the engine's own parser in its interpreter and write <catalogue>-<version>.json",
        description="Runs in the engine's interpreter (imports its argument parser, never its model "
        "code) and writes the catalogue `run` and `plan` use when the engine's version matches.",
    )
    build.add_argument("--engine", required=True, help="the engine's package name, as in the recipes' kind")
    build.add_argument("--python", required=True, metavar="PATH", help="the engine's interpreter")
    build.add_argument(
        "--out",
        metavar="DIR",
        help="where to write it (default LLMD_CATALOG_DIR, else the directory `run` looks in first)",
    )


def _add_probe(sub: _Commands) -> None:
    probe = sub.add_parser(
        "probe",
        help="exec probe: ask this pod's launcher whether it is live, ready or started (exit 0 or 1)",
        description="Ask the launcher's probe server (LLMD_PROBE_HOST, else 127.0.0.1; port "
        "LLMD_PROBE_PORT) and exit 0 if it answers 200, 1 otherwise, with one line saying why; 2 for a "
        "bad --timeout, LLMD_PROBE_HOST or LLMD_PROBE_PORT. "
        "For clusters that prefer exec probes; httpGet probes on /livez, /readyz and /startupz answer "
        "the same.",
    )
    probe.add_argument(
        "which",
        choices=tuple(PROBE_ENDPOINTS),
        help="asks " + ", ".join(e.path for e in PROBE_ENDPOINTS.values()),
    )
    probe.add_argument(
        "--port", type=_port, help=f"probe server port (default LLMD_PROBE_PORT, else {PROBE_PORT})"
    )
    probe.add_argument(
        "--timeout", type=float, default=2.0, metavar="SECONDS", help="give up after this (default 2)"
    )


def _add_lint(sub: _Commands) -> None:
    lint = sub.add_parser(
        "lint",
        help="check a rendered manifest against the plan of every launcher pod in it",
        description="Plan every pod template that runs the launcher (Deployment, StatefulSet, DaemonSet, "
        "Job, LeaderWorkerSet, DisaggregatedSet roles) with the env the kubelet and LWS would give it and "
        "the recipe it mounts (its ConfigMap when in the stream, else the image's built-in recipe), and "
        "check the manifest against the plan: accelerator requests, probe port and start-up budget, grace "
        "period, memory, the recipe's ConfigMap and pool, service links. One line per finding.",
        epilog="exit codes: 0 no finding, 1 findings (one line each on stdout), 2 bad input (one line). "
        "E.g. kubectl kustomize deploy/kimi-k3.1-pro | llm-d-launcher lint -f -",
    )
    lint.add_argument(
        "-f", "--filename", required=True, metavar="FILE", help="the rendered manifest; - reads stdin"
    )


def _add_local_group(sub: _Commands) -> None:
    sub.add_parser(
        "local-group",
        help="try a recipe pool's whole LWS group on this machine: every pod in its own network namespace",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        deferred=_local_group_arguments,
    )


def _add_capabilities(sub: _Commands) -> None:
    sub.add_parser(
        "capabilities",
        help="check a model server's capabilities (render, metrics, KV events, P/D path): PASS/FAIL each",
        description="Probe a running model server for the capabilities a recipe pool promises "
        "(--recipe/--pool) or --require names, as its pod's launcher does; each PASS or FAIL with the "
        "reason, the detected runtime and who required it. Exit 0 all required passed, 1 one failed, "
        "2 bad input.",
        deferred=_capabilities_arguments,
    )


def _capabilities_arguments(parser: argparse.ArgumentParser) -> None:
    from launcher.verify_capabilities import add_arguments

    add_arguments(parser)


# The commands in the order --help lists them.
_COMMANDS: dict[str, Callable[[_Commands], None]] = {
    "plan": _add_plan,
    "run": _add_run,
    "recipes": _add_recipes,
    "version": _add_version,
    "catalog": _add_catalog,
    "probe": _add_probe,
    "lint": _add_lint,
    "capabilities": _add_capabilities,
    "local-group": _add_local_group,
}


def _local_group_arguments(parser: argparse.ArgumentParser) -> None:
    import launcher.localgroup

    what = (launcher.localgroup.__doc__ or "").split(": ", 1)[1]  # after the command's name
    parser.description = what[:1].upper() + what[1:]
    launcher.localgroup.add_arguments(parser)


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number 1-65535")
    return int(text)


def _cli_settings(ns: argparse.Namespace) -> dict[str, object]:
    from launcher.config.settings import CLI_FLAGS

    values: dict[str, object] = {name: getattr(ns, name) for name in CLI_FLAGS if name != "extra_env"}
    if ns.extra_env:
        env = {}
        for item in ns.extra_env:
            key, sep, value = item.partition("=")
            if not sep or not key:
                shown = item if "=" not in item else f"{key}=…"
                raise ConfigError.one("--env", f"{shown!r} is not KEY=VALUE", "write it as --env NAME=value")
            if is_secret_name(key):
                raise ConfigError.one(
                    "--env",
                    f"{key} looks like a secret, and a command line is visible to every process",
                    "give it to the pod from a Secret (env valueFrom.secretKeyRef)",
                )
            env[key] = value
        values["extra_env"] = env
    return values


def _cmd_plan(ns: argparse.Namespace) -> int:
    from launcher import render
    from launcher.config.recipe_file import load_recipe
    from launcher.config.settings import load_settings, unknown_env

    settings = load_settings(**_cli_settings(ns))
    for problem in unknown_env(os.environ):
        say(problem.line("warning"))
    recipe = load_recipe(settings.recipe_source, name_given="recipe" in settings.model_fields_set)
    from launcher.catalogs.shelf import load_shelf

    shelf = load_shelf(settings.catalog_dir)
    if ns.group:
        from roles.group import command_line_problems, plan_group

        report = plan_group(settings, recipe, shelf, ns.engine_version)
        if problems := [p for plan in report.plans for p in command_line_problems(plan, os.environ)]:
            raise ConfigError(list(dict.fromkeys(problems)))  # every pod of a pool: one line
        sys.stdout.write(render.render_group(report, ns.format))
        _notes_to_stderr(report.notes, ns.format)
        failed = [c for c in report.checks if not c.ok]
        if failed:
            raise ConfigError(
                [
                    Problem("plan --group", f"{c.name} check failed: {c.detail}", "fix the recipe")
                    for c in failed
                ]
            )
        return 0

    from launcher.config.model_file import read_model_config
    from roles import build_plan
    from roles.group import command_line_problems, port_problems

    model_config = read_model_config(ns.model_config, "--model-config") if ns.model_config else None
    plan = build_plan(
        settings, recipe, shelf=shelf, engine_version=ns.engine_version, model_config=model_config
    )
    if problems := port_problems(plan) + command_line_problems(plan, os.environ):
        raise ConfigError(problems)
    sys.stdout.write(render.render_plan(plan, ns.format))
    _notes_to_stderr(plan.notes, ns.format)
    return 0


def _notes_to_stderr(notes: Sequence[str], fmt: str) -> None:
    """Text output carries its notes; shell and JSON stdout stay machine-readable, notes go to stderr."""
    if fmt != "text":
        for note in notes:
            say(f"note: {note}")


def _cmd_recipes(ns: argparse.Namespace) -> int:
    if ns.recipes_action == "schema":
        import json

        from launcher.config.recipe import json_schema

        print(json.dumps(json_schema(), indent=2))
        return 0
    if ns.recipes_action == "show":
        from launcher.config.recipe_file import builtin_recipe_text

        if ns.capabilities:
            sys.stdout.write(_capabilities_text(ns.name))
            return 0
        sys.stdout.write(builtin_recipe_text(ns.name))
        return 0
    from launcher.config.recipe_file import RecipeSource, builtin_recipe_names, load_recipe

    for name in builtin_recipe_names():
        recipe = load_recipe(RecipeSource(name, None))
        pools = ", ".join(f"{p} ({pool.kind})" for p, pool in recipe.pools.items())
        guide = recipe.guide
        source = f"guide {guide.name}, {guide.accelerator}" if guide else "no llm-d guide"
        engines = ", ".join(dict.fromkeys(pool.kind for pool in recipe.pools.values()))
        print(f"{name}: {source}; {engines} | pools: {pools}")
    return 0


def _cmd_lint(ns: argparse.Namespace) -> int:
    from roles.lint import lint
    from roles.manifest import MAX_MANIFEST_BYTES, parse_manifest

    label = "lint -f " + ("-" if ns.filename == "-" else repr(ns.filename))
    try:
        if ns.filename == "-":
            raw = sys.stdin.buffer.read(MAX_MANIFEST_BYTES + 1)
        else:
            with open(ns.filename, "rb") as handle:
                raw = handle.read(MAX_MANIFEST_BYTES + 1)
        text = raw.decode("utf-8")
    except OSError as exc:
        raise ConfigError.one(
            label, f"cannot be read ({exc.strerror})", "give a readable file, or - for stdin"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError.one(label, "is not UTF-8 text", "give the rendered manifest") from None
    objects = parse_manifest(text, label)
    try:
        report = lint(objects)
    except (AttributeError, TypeError, KeyError, ValueError) as exc:  # a field of another shape
        raise ConfigError.one(
            label,
            f"holds a field that is not of its Kubernetes type ({type(exc).__name__})",
            "validate it first (kubectl apply --dry-run=server -f)",
        ) from None
    for note in report.notes:
        say(f"note: {note}")
    for finding in report.findings:
        print(finding.line())
    say(f"lint: {len(report.findings)} finding(s) in {report.pods} launcher pod(s)")
    return 1 if report.findings else 0


def _capabilities_text(name: str) -> str:
    """Each pool's capabilities (roles/capabilities.py) as llm-d's proposal writes them (llm-d/llm-d
    proposals/model-server-capability-contract.md @0172f04d); a pool's `capabilities:` reads it back."""
    import yaml

    from launcher.config.recipe_file import RecipeSource, builtin_recipe_text, load_recipe
    from launcher.contract.capabilities import to_requirements
    from roles.capabilities import pool_capabilities

    builtin_recipe_text(name)  # an unknown name: one line naming the built-in ones
    recipe = load_recipe(RecipeSource(name, None))
    pools = {
        pool: to_requirements({c: level for c, (level, _) in pool_capabilities(recipe, pool).items()})
        for pool in recipe.pools
    }
    head = f"# {name}: each pool's capabilities, derived and declared (`plan` shows who asked for each)\n"
    return head + yaml.safe_dump(pools, sort_keys=False)


def _cmd_catalog(ns: argparse.Namespace) -> int:
    from launcher.catalogs.build import build_catalog
    from launcher.config.settings import Settings

    out = ns.out or os.environ.get("LLMD_CATALOG_DIR") or Settings.model_fields["catalog_dir"].default
    print(build_catalog(ns.engine, ns.python, out))
    return 0


def version_text() -> str:
    """What an image holds: the launcher, each built-in recipe (by content: recipes carry no version)
    and the engine release each flag catalogue was generated from: first the ones the image built
    from its own engine (LLMD_CATALOG_DIR, `catalog build`), which `run` uses, then roles/catalogs/."""
    import hashlib
    from importlib import metadata, resources

    from launcher.catalogs.shelf import load_shelf
    from launcher.config.defaults import CATALOG_DIR
    from launcher.config.recipe_file import builtin_recipe_names
    from roles.flags import BUILT_IN

    try:
        version = metadata.version("llm-d-launcher")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        version = "unknown (not installed)"
    lines = [f"llm-d-launcher {version}"]
    recipes = resources.files("launcher.config").joinpath("recipes")
    for name in builtin_recipe_names():
        digest = hashlib.sha256(recipes.joinpath(f"{name}.yaml").read_bytes()).hexdigest()[:12]
        lines.append(f"recipe {name} sha256:{digest}")
    try:
        shelf = load_shelf(os.environ.get("LLMD_CATALOG_DIR", CATALOG_DIR))
    except ConfigError as exc:  # a broken image catalogue: said, as `run` would refuse it
        shelf = load_shelf("")
        lines.append(f"engine catalogue: {exc.problems[0]}")
    for catalog in shelf:
        built = "" if catalog.source == BUILT_IN else f" (built in this image: {catalog.source})"
        lines.append(f"engine catalogue {catalog.name}: {catalog.label}{built}")
    return "\n".join(lines) + "\n"


class _VersionAction(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        sys.stdout.write(version_text())
        parser.exit(0)


def _exit_now(code: int, output: TextIO | None = None) -> None:
    """Skip the interpreter's teardown: tens of ms of module clean-up on the path from engine death
    to pod exit, and as much as `plan` spends beyond its settings library (bench/results/
    plan_speed.md); nothing is left to clean. `output`, the stream that carries the command's result:
    when it cannot take the last of it, the command fails with 120, as the interpreter's own final
    flush would make it (CPython Python/pylifecycle.c, Py_FinalizeEx), with one line saying why."""
    if output is not None:
        try:
            output.flush()
        except (OSError, ValueError) as exc:
            say(f"llm-d-launcher: error: the output could not be written ({exc})")
            code = 120
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            silence()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """The entry point. A reader that stops early (`recipes schema | head`) ends a command quietly
    with 1, as the Python docs advise (signal module, "Note on SIGPIPE"): the rest is not wanted."""
    try:
        try:
            return _main(argv)
        finally:  # here, not in the interpreter's last flush: a reader gone is met inside the try
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        silence(1)
        return 1


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = _parser(args[0] if args and args[0] in _COMMANDS else None)
    ns = parser.parse_args(args)
    try:
        if ns.command == "plan":
            code = _cmd_plan(ns)
            if argv is None:  # the real entrypoint: the plan is written, nothing else is left to do
                _exit_now(code, output=sys.stdout)
            return code
        if ns.command == "run":
            from launcher.run import run

            exiting = argv is None  # the real entrypoint: every child is gone and every line flushed
            code = run(_cli_settings(ns), exiting=exiting)
            if exiting:
                _exit_now(code)
            return code
        if ns.command == "recipes":
            return _cmd_recipes(ns)
        if ns.command == "catalog":
            return _cmd_catalog(ns)
        if ns.command == "lint":
            return _cmd_lint(ns)
        if ns.command == "version":
            sys.stdout.write(version_text())
            return 0
        if ns.command == "local-group":
            from launcher.localgroup import command

            return command(ns, list(argv if argv is not None else sys.argv[1:]))
        if ns.command == "capabilities":
            from launcher.verify_capabilities import command as check_capabilities

            return check_capabilities(ns)
        if ns.command == "probe":
            from healthchecks.probe import probe

            return probe(ns.which, ns.port, timeout=ns.timeout)
        parser.print_help(sys.stderr)
        return 2
    except ConfigError as exc:
        scrub = Scrubber(secret_values(os.environ))  # a secret's value may sit in any setting
        for problem in exc.problems:
            say(problem.line(scrub=scrub))
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
