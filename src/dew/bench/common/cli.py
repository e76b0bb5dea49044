"""The command line of every dew entry point: tyro to parse, one error line, one exit code.

Exit codes mean one thing everywhere:
    0  ok
    1  a case failed, or a comparison found a change
    2  bad input: a flag, a value, a path, or a file that is not what it should be

Bad input never prints a traceback: it is one line, `<prog>: error: <message>`, naming the
bad value and what is valid. tyro reports its parse failures through its error hook
(`tyro._errors.on_parse_error`, pinned with tyro in the lock); the hook turns each into a
`UsageError` with one line of our own wording, so nothing is scraped from tyro's boxes.

The error style itself (`UsageError`, `one_line`, `say`, the exit codes) lives in
`dew.bench.common.errors`, which never imports tyro: the schema and the stdlib-only helpers
raise through it. This module re-exports those names, so an entry point needs only `cli`.
The commands that may not import tyro (the host side) parse with
dew.bench.common.arguments, in the same style.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from dew.bench.common import arguments
from dew.bench.common.errors import (  # noqa: F401  (re-exported: the entry points' one import)
    EXIT_CHANGED,
    EXIT_OK,
    EXIT_USAGE,
    MAX_COUNT,
    MAX_LINE,
    UsageError,
    check_count,
    first_line,
    one_line,
    say,
    stdout_closed,
)
from dew.flags import flag  # noqa: F401  (re-exported: every entry point spells flags so)

T = TypeVar("T")  # Python 3.11 has no PEP 695 generics

# --- parsing ---------------------------------------------------------------------------------


def parse(args_type: type[T], argv: Sequence[str], *, prog: str, config=()) -> T:
    """tyro.cli(args_type) over argv; raises UsageError (one line) on bad input.

    A value that begins with `--` is taken as the user wrote it for the top-level string
    flags (`--xla-flags "--xla_cpu_foo=1"`): tyro would read it as a flag. `--help`
    prints tyro's help and raises SystemExit(0), as tyro does.
    """
    import tyro
    from tyro import _errors  # the error hook: private but pinned, see the module docstring

    argv = join_dash_values(args_type, argv)
    unknown = unknown_flags(args_type, argv)

    def hook(event: Any) -> None:
        # tyro lets an unknown flag take the next word as its value, then misses the
        # positional it was (`--frob a.json`: "RUN needs a value"): name the flag instead.
        confused = (_errors.BadValue, _errors.UnrecognizedArgs, _errors.MissingArgs)
        if unknown and isinstance(event, confused):
            raise UsageError(f"unrecognized argument {unknown[0]}; --help lists the valid ones")
        _raise_usage_error(event)

    with _errors.on_parse_error(hook):
        try:
            return tyro.cli(args_type, args=list(argv), prog=prog, config=tuple(config))
        except SystemExit as stop:
            if stop.code:  # an error the hook did not see (tyro always fires it today)
                raise UsageError(f"cannot parse the command line: {' '.join(argv)}") from None
            raise


def join_dash_values(args_type: type, argv: Sequence[str]) -> list[str]:
    """`--name VALUE` -> `--name=VALUE` where `name` is a top-level string field and VALUE
    starts with `-`: a string flag's value is the next word, whatever it begins with."""
    if not dataclasses.is_dataclass(args_type):
        return list(argv)
    hints = typing.get_type_hints(args_type)
    string_flags = {
        spelling
        for field in dataclasses.fields(args_type)
        if _takes_string(hints.get(field.name))
        for spelling in (flag(field.name), "--" + field.name)
    }
    return arguments.join_dash_values(argv, string_flags)


def unknown_flags(args_type: type, argv: Sequence[str]) -> list[str]:
    """The words of argv spelled as a flag that no field of `args_type` has (top level; a
    nested config's `--name.` prefix counts as known); [] for a type that is no dataclass."""
    if not dataclasses.is_dataclass(args_type):
        return []
    known, nested = {"-h", "--help"}, []
    hints = typing.get_type_hints(args_type)
    for field in dataclasses.fields(args_type):
        for spelling in (flag(field.name), "--" + field.name):
            known |= {spelling, "--no-" + spelling[2:]}
            nested.append(spelling + ".")
        hint = hints.get(field.name)
        if any(map(dataclasses.is_dataclass, (hint, *typing.get_args(hint)))):
            nested.append("--")  # a config's or subcommand's flags: tyro's to judge
    return [
        word
        for word in argv
        if word.startswith("-") and not _number(word) and word.split("=")[0] not in known
        and not any(word.startswith(prefix) for prefix in nested)
    ]  # fmt: skip


def _number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _takes_string(hint: Any) -> bool:
    if hint is str:
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return args == [str]
    return False


def _raise_usage_error(event: Any) -> None:
    """tyro's parse-error hook: every failure becomes one UsageError line of our wording."""
    from tyro import _errors as e

    def name(argument: Any) -> str:
        return argument.display_name() if argument is not None else "a value"

    if isinstance(event, e.InvalidChoice):
        choices = ", ".join(str(choice) for choice in event.argument.lowered.choices or ())
        raise UsageError(f"{name(event.argument)} {event.value!r} is not valid; valid: {choices}")
    if isinstance(event, e.BadValue):
        argument = event.argument
        if argument is not None and argument.is_positional():
            raise UsageError(f"missing {argument.lowered.metavar or name(argument)}")
        raise UsageError(f"{name(argument)} needs a value")
    if isinstance(event, e.UnrecognizedArgs):
        tokens = " ".join(event.tokens)
        raise UsageError(f"unrecognized argument {tokens}; --help lists the valid ones")
    if isinstance(event, e.MissingSubcommand):
        names = ", ".join(event.subcommand_spec.parser_from_name)
        raise UsageError(f"missing the subcommand; valid: {names}")
    if isinstance(event, e.MissingArgs):
        missing = ", ".join(
            (a.arg.lowered.metavar or a.arg.display_name())
            if a.arg.is_positional()
            else a.arg.display_name()
            for a in event.missing_arguments
        )
        extra = f" (unrecognized: {' '.join(event.unrecognized_tokens)})"
        raise UsageError(f"missing {missing}" + (extra if event.unrecognized_tokens else ""))
    if isinstance(event, e.MutexConflict):
        raise UsageError(f"{event.first_token} and {event.second_token} exclude each other")
    if isinstance(event, e.SubcommandConflict):
        raise UsageError(f"{event.attempted!r} conflicts with {event.already_selected!r}")
    if isinstance(event, e.InstantiationFailure):
        message = first_line(event.message)
        where = f"{event.argument.display_name()}: " if event.argument is not None else ""
        # tyro's wording for a union (`float | None`): name the value and what it is not.
        union = re.match(r"no type matching (.+) could be instantiated from \[(.*)\]", message)
        if union:
            words = {"INT": "an integer", "FLOAT": "a number", "STR": "a string"}
            kinds = [
                words.get(kind, kind.strip("{}"))
                for kind in union.group(1).split("|")
                if kind != "{None}"
            ]
            message = f"{union.group(2)} is not {' or '.join(kinds)}"
        # Python's words for a bad number: say what the value is not, in dew's
        number = re.match(r"(could not convert string to float|invalid literal for int\(\) "
                          r"with base 10): (.+)$", message)  # fmt: skip
        if number:
            kind = "a number" if number.group(1).startswith("could") else "an integer"
            message = f"{number.group(2)} is not {kind}"
        raise UsageError(f"{where}{message}")
    raise UsageError(f"invalid command line ({type(event).__name__})")


# --- the entry point -------------------------------------------------------------------------


def run(prog: str, body: Callable[[], int]) -> int:
    """Run an entry point's body: a UsageError is one line and exit 2, --help exit 0."""
    try:
        return body()
    except UsageError as error:
        say(prog, one_line(error))
        return EXIT_USAGE
    except SystemExit as stop:  # --help, or a body that exits on purpose
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BrokenPipeError:
        return stdout_closed()
