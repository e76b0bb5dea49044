"""`dew COMMAND [ARGS...]`: the subcommands, one module each in dew.commands, and the dispatch.

Each command module holds `SUMMARY` (its line in `dew --help`) and `main(argv) -> int`,
and imports its entry point only when it runs, so `dew --help` and a wrong command answer
at once, without jax. A wrong command is one line and exit 2 (dew.bench.common.errors).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from dew import __version__
from dew.bench.common.errors import EXIT_USAGE, say, stdout_closed

PROG = "dew"
# The subcommands in the order `dew --help` lists them: name -> module of dew.commands.
COMMANDS = ("step", "data", "compare", "validate", "report", "reproduce", "ab", "schema")


def command(name: str):
    """The module of subcommand `name` (its SUMMARY and main)."""
    return importlib.import_module(f"dew.commands.{name}")


def help_text() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [f"usage: {PROG} COMMAND [ARGS...]   ({PROG} COMMAND --help: the command's own)", ""]
    lines += ["commands:"]
    lines += [f"  {name:<{width}}  {command(name).SUMMARY}" for name in COMMANDS]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return dispatch(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:  # `dew --help | head`: the reader left; no traceback
        return stdout_closed()


def dispatch(args: list[str]) -> int:
    if not args:
        print(help_text(), file=sys.stderr)
        return EXIT_USAGE
    name, rest = args[0], args[1:]
    if name in ("-h", "--help", "help"):
        print(help_text())
        return 0
    if name == "--version":
        print(f"{PROG} {__version__}")
        return 0
    if name not in COMMANDS:
        say(PROG, f"unknown command {name!r}; valid: {', '.join(COMMANDS)} ({PROG} --help)")
        return EXIT_USAGE
    return command(name).main(rest)
