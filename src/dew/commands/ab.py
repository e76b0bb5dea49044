"""`dew ab`: `nox -s ab` (dew.host.sessions.ab_session); `--variant tpu-host` on this host
(dew.commands.on_chip)."""

from __future__ import annotations

SUMMARY = "two stacks timed side by side in paired, interleaved rounds (nox -s ab)"


def main(argv: list[str]) -> int:
    from dew.commands.through_nox import run_session
    from dew.host.sessions.ab_session import check_arguments, help_text

    if not {"-h", "--help"} & set(argv) and _on_tpu_host(argv):
        from dew.commands.on_chip import ab  # no nox, no image: the host's own stack

        return ab(argv)
    return run_session("ab", help_text("dew ab"), argv, check_arguments)


def _on_tpu_host(argv: list[str]) -> bool:
    """--variant tpu-host given (as the parser keeps the last)."""
    from dew.bench.record.stack import TPU_HOST
    from dew.host.benchmarks import last_option

    return last_option(argv, "--variant") == TPU_HOST
