"""`dew ab`: `nox -s ab` (dew.host.sessions.ab_session)."""

from __future__ import annotations

SUMMARY = "two stacks timed side by side in paired, interleaved rounds (nox -s ab)"


def main(argv: list[str]) -> int:
    from dew.commands.through_nox import run_session
    from dew.host.sessions.ab_session import check_arguments, help_text

    return run_session("ab", help_text("dew ab"), argv, check_arguments)
