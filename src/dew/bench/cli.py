"""Command-line parsing shared by the benchmark tools: tyro, with its error boxes as one line.

tyro reports a bad flag, value or subcommand as a multi-line box with help text; a tool
reports bad input as one line on stderr and exits 2. `parse` turns the box into a
UsageError carrying the box's message.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence


class UsageError(ValueError):
    """Bad command-line input: one line on stderr, exit 2."""


def parse[T](args_type: type[T], argv: Sequence[str], *, prog: str, config=()) -> T:
    """tyro.cli(args_type) over argv; raises UsageError (one line) on bad input.

    --help prints tyro's help and raises SystemExit(0), as tyro does.
    """
    import tyro

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            return tyro.cli(args_type, args=list(argv), prog=prog, config=tuple(config))
    except SystemExit as stop:
        if not stop.code:  # --help
            print(captured.getvalue(), end="")
            raise
        raise UsageError(first_message(captured.getvalue())) from None


def first_message(boxed: str) -> str:
    """The message of tyro's first error box, as one line.

    tyro draws a title, a rule, the message, a rule, then help text; with UTF-8 boxes or
    plain ASCII depending on the terminal, so only the rules and box edges are relied on.
    """
    lines = [line.strip(" │╭╮╰╯") for line in boxed.splitlines()]
    lines = [line for line in lines if line]
    sections: list[list[str]] = [[]]
    for line in lines[1:]:  # lines[0] is the box's title ("Invalid choice")
        if set(line) <= {"─", "-", " "}:
            sections.append([])
        else:
            sections[-1].append(line)
    sections = [" ".join(section) for section in sections if section]
    if not sections:
        return " ".join(lines)
    # The section after the message lists what is valid when tyro knows it
    # ("Available subcommands: ..."); the rest is help text.
    if len(sections) > 1 and sections[1].startswith("Available"):
        return f"{sections[0]}; {sections[1]}"
    return sections[0]
