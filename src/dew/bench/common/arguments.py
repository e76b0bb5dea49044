"""dew's argument style for the commands that may use the standard library only (the host
side's `ab` and `reproduce`, the Kubernetes manifests), spelled as tyro spells the others:
kebab-case flags, `--flag VALUE` or `--flag=VALUE`, a repeated flag appends, `--help`
lists every flag with its help. Bad input is one errors.UsageError line, never argparse's
usage block.

A string flag's value is the next word whatever it begins with (`--a-xla-flags
--xla_cpu_foo=1`), as dew.bench.common.cli.parse does for tyro: `join_dash_values` is that
one rule for both.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection, Sequence

from dew.bench.common.errors import UsageError


def join_dash_values(argv: Sequence[str], string_flags: Collection[str]) -> list[str]:
    """`--name VALUE` -> `--name=VALUE` where `--name` is one of `string_flags` and VALUE
    starts with `-`: a parser would read that value as a flag of its own."""
    out: list[str] = []
    tokens = list(argv)
    index = 0
    while index < len(tokens):
        token = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if token in string_flags and following is not None and following.startswith("-"):
            out.append(f"{token}={following}")
            index += 2
            continue
        out.append(token)
        index += 1
    return out


class OneLineParser(argparse.ArgumentParser):
    """argparse in dew's style: an error raises UsageError (`hint` added to an unrecognized
    argument's), a string flag takes a value that begins with `-`, positionals may come
    after flags, and a flag is never taken for the abbreviation of another."""

    def __init__(self, *args, hint: str = "--help lists the flags", **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        # A description is a module's docstring: its paragraphs as written.
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        self.hint = hint

    def error(self, message: str):  # argparse's own prints a usage block, then exits 2
        if message.startswith("unrecognized arguments") and self.hint:
            message += f" ({self.hint})"
        raise UsageError(message)

    def string_flags(self) -> set[str]:
        """The flags that take one word as a string."""
        return {
            spelling
            for action in self._actions  # a switch (--help, store_true) takes no word
            if action.option_strings and action.nargs is None and action.type in (None, str)
            for spelling in action.option_strings
        }

    def parse(self, argv: Sequence[str]) -> argparse.Namespace:
        """The namespace of `argv` (positionals and flags in any order); UsageError."""
        return self.parse_intermixed_args(join_dash_values(argv, self.string_flags()))

    def split(self, argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
        """A session's own flags out of `argv`, and the rest, in order, for the tool it runs
        (whose parser checks them): `nox -s bench-gpu -- --variant cuda12 --steps 50`."""
        return self.parse_known_args(join_dash_values(argv, self.string_flags()))


def check_xla_flags(flag: str, value: str | None) -> None:
    """XLA flags as XLA reads them from XLA_FLAGS: words that begin with `--`. XLA takes a
    value of one other word for a file of flags, and ignores a stray word after real flags,
    so neither is a flag a run could have meant; UsageError, one line."""
    stray = [word for word in (value or "").split() if not word.startswith("--")]
    if stray:
        raise UsageError(f"{flag} {value!r}: {stray[0]!r} is no XLA flag (XLA flags are "
                         "--name or --name=value words)")  # fmt: skip
