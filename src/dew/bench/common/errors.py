"""dew's error style, for every entry point and helper: bad input is one `UsageError` line,
`<prog>: error: <message>`, and one exit code per meaning.

    0  ok
    1  a case failed, or a comparison found a change
    2  bad input: a flag, a value, a path, or a file that is not what it should be

Standard library only at the top (pydantic is imported where a pydantic error is read), so
the schema and the noxfile's helpers can raise and print through it.
"""

from __future__ import annotations

import sys

from dew.flags import flag

EXIT_OK, EXIT_CHANGED, EXIT_USAGE = 0, 1, 2
MAX_LINE = 400  # an XLA or pydantic message runs to pages; a line is enough to act on


class UsageError(ValueError):
    """Bad input (a flag, a value, a path, a file): one line on stderr, exit 2."""


def one_line(error: BaseException, *, flags: bool = False) -> str:
    """An error as one line: a pydantic error's first problem with where it is, else the
    type and first line of the message (XLA's run to pages). With `flags`, a pydantic
    location is spelled as the flag a user typed (`--data.image-size`)."""
    import pydantic  # in every dew environment; imported here to keep the top stdlib-only

    if isinstance(error, pydantic.ValidationError) and error.errors():
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        message = first["msg"].removeprefix("Value error, ")  # pydantic's wrapper of a raise
        if flags and where:
            text = f"{flag(where)}: {message}"
        else:
            text = f"invalid {error.title}{'.' + where if where else ''}: {message}"
        if "input" in first and first["type"] not in ("missing", "extra_forbidden"):
            text += f" (got {first['input']!r})"
    elif isinstance(error, UsageError | OSError | UnicodeDecodeError):
        text = first_line(str(error)) or type(error).__name__
    else:
        message = first_line(str(error))
        text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def say(prog: str, message: str) -> None:
    """One line on stderr in the shared format."""
    print(f"{prog}: error: {message}", file=sys.stderr, flush=True)
