"""dew's argument style without tyro (dew.bench.common.arguments): the host's ab and
reproduce and the Kubernetes manifests parse with it; tyro's commands share its rule for a
string flag whose value begins with a dash."""

from __future__ import annotations

import dataclasses

import pytest

from dew.bench.common import cli
from dew.bench.common.arguments import OneLineParser, join_dash_values
from dew.bench.common.errors import UsageError


def parser() -> OneLineParser:
    parse = OneLineParser(prog="tool", description="What the tool does.\n\nIts second line.")
    parse.add_argument("names", nargs="*", metavar="NAME")
    parse.add_argument("--xla-flags", default="", help="XLA flags")
    parse.add_argument("--outside", action="append", default=[], help="once each")
    parse.add_argument("--rounds", type=int, default=7)
    parse.add_argument("--overwrite", action="store_true")
    return parse


def test_a_string_flag_takes_a_value_that_begins_with_a_dash_in_either_spelling():
    for argv in (["--xla-flags", "--xla_cpu_foo=1", "a"], ["a", "--xla-flags=--xla_cpu_foo=1"]):
        args = parser().parse(argv)
        assert (args.xla_flags, args.names) == ("--xla_cpu_foo=1", ["a"])


def test_positionals_after_flags_and_a_repeated_flag_appends():
    args = parser().parse(["--outside", "x", "a", "--rounds", "3", "b", "--outside=y"])
    assert (args.names, args.outside, args.rounds) == (["a", "b"], ["x", "y"], 3)


def test_switches_and_numbers_are_not_string_flags():
    assert parser().string_flags() == {"--xla-flags", "--outside"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rounds", "x"], "argument --rounds: invalid int value: 'x'"),
        (["--bogus"], "unrecognized arguments: --bogus (--help lists the flags)"),
        (["--xla-flags"], "argument --xla-flags: expected one argument"),
        (["--over"], "unrecognized arguments: --over"),  # never an abbreviation
    ],
)
def test_bad_input_is_one_usage_error_line(argv, message, capsys):
    with pytest.raises(UsageError) as error:
        parser().parse(argv)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
    assert capsys.readouterr() == ("", "")  # nothing of argparse's usage block


def test_help_keeps_the_descriptions_paragraphs():
    text = parser().format_help()
    assert text.startswith("usage: tool ") and "What the tool does.\n\nIts second line." in text


def test_tyros_commands_join_the_same_way():
    @dataclasses.dataclass
    class Args:
        xla_flags: str = ""
        steps: int = 1

    argv = ["--xla-flags", "--xla_cpu_foo=1", "--steps", "-1"]
    assert cli.join_dash_values(Args, argv) == join_dash_values(argv, {"--xla-flags"})
    assert cli.join_dash_values(Args, argv) == ["--xla-flags=--xla_cpu_foo=1", "--steps", "-1"]


def test_split_takes_a_sessions_own_flags_and_keeps_the_rest_in_order():
    parse = OneLineParser(prog="nox -s bench-gpu --")
    parse.add_argument("--variant", default="cuda13")
    parse.add_argument("--data.path", dest="data_path")
    argv = ["--steps", "5", "--variant", "cuda12", "--xla-flags", "--xla_cpu_foo=1",
            "--architectures", "unet", "uvit", "--data.path=/data"]  # fmt: skip
    own, rest = parse.split(argv)
    assert (own.variant, own.data_path) == ("cuda12", "/data")
    assert rest == ["--steps", "5", "--xla-flags", "--xla_cpu_foo=1", "--architectures",
                    "unet", "uvit"]  # fmt: skip
    with pytest.raises(UsageError, match="argument --variant: expected one argument"):
        parse.split(["--variant"])
