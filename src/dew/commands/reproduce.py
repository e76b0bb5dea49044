"""`dew reproduce`: `nox -s reproduce` (dew.host.sessions.reproduce_session)."""

from __future__ import annotations

SUMMARY = "rerun a step record on its own stack, then compare (nox -s reproduce)"


def main(argv: list[str]) -> int:
    from dew.commands.through_nox import run_session
    from dew.host.sessions.reproduce_session import check_arguments, help_text

    return run_session("reproduce", help_text("dew reproduce"), argv, check_arguments)
