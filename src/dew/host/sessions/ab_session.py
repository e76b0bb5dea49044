"""Two stacks timed side by side on this host in paired, interleaved rounds (`nox -s ab`).

A and B are each a commit, a record (its stack) or an image; code from outside dew (a git
checkout at PATH@REV, a folder or a wheel) is installed beside each side's stack,
--outside on both sides, --a-outside or --b-outside on one. Every round runs every case
once per side, each in a fresh process, alternating which side goes first; then one record
per side and the A/B table of the paired per-round ratios (dew.bench.analysis.ab),
markdown and chart.
"""

from __future__ import annotations

from pathlib import Path

from dew import platforms
from dew.bench.common.errors import UsageError
from dew.bench.record.stack import TPU_HOST
from dew.host import replay
from dew.host.ab_rounds import (
    ab_parser,
    check_cases,
    check_side,
    parse_ab,
    resolve_side,
    run_rounds,
)
from dew.host.benchmarks import SMOKE_ENV
from dew.host.engine import ROOT, EngineError
from dew.host.runner import new_run_dir
from dew.host.venvs import today_runner


def help_text(prog: str = "nox -s ab --") -> str:
    """The session's --help: every flag, then what it does."""
    return ab_parser(prog, __doc__).format_help()


def check_arguments(argv: list[str], python: str, name: str = "ab") -> None:
    """Every argument checked: each side a record or commit that resolves (or left to the
    engine as an image), the cases and each side's XLA flags by `python`'s dew (the dew
    command checks before it starts nox; the session checks the same before its first
    image); one line, exit 2."""
    try:
        args = parse_ab(argv)
        replay.check_image_out(name, args.out)
        for side, given in (("A", args.a), ("B", args.b)):
            check_side(side, given, args.variant)
        check_cases(python, args)
    except (UsageError, EngineError) as error:
        replay.usage(name, str(error))


def ab(session, posargs: list[str], name: str = "ab") -> None:
    """The session over `posargs` (ab_parser; `--help` prints help_text()); reproduce
    --interleaved comes here too (`name`: the session its errors name)."""
    if {"-h", "--help"} & set(posargs):
        return print(help_text(), end="")
    try:
        args = parse_ab(posargs)
    except UsageError as error:
        replay.usage(name, str(error))
    if args.variant == TPU_HOST:  # no image: the dew command runs it on the host itself
        replay.usage(name, f"--variant {TPU_HOST} runs on the TPU host without nox: "
                           f"dew ab {' '.join(posargs)}")  # fmt: skip
    engine = replay.engine_for(session, name, args.variant)
    try:
        sides = {
            name: resolve_side(engine, name, given, args.variant)
            for name, given in (("A", args.a), ("B", args.b))
        }
    except EngineError as error:
        replay.usage(name, str(error))
    today = today_runner(session)  # its setuptools builds the outside code's wheels
    try:  # the names, preset and configs, by this checkout's tool: before any image
        check_cases(str(Path(session.bin) / "python"), args)
    except UsageError as error:
        replay.usage(name, str(error))
    for side in sides.values():
        side.packages, lines = replay.outside_wheels(
            session, name, args.outside[side.name], side.environment, f"{side.name} {side.given}",
            replay.scratch_dir(),
        )  # fmt: skip
        for line in lines:
            session.log(f"{side.name} not matched: {line}")
    to_build = [side for side in sides.values() if side.image is None]
    made = replay.materialise_all(session, name, engine, [side.spec for side in to_build])
    for side, (image, lines) in zip(to_build, made, strict=True):
        side.image = image
        for line in lines:
            session.log(f"{side.name} not matched: {line}")
    for side in sides.values():
        if side.image.variant != args.variant:
            why = f"a {side.image.variant} image, not {args.variant} (--variant)"
            replay.usage(name, f"{side.name} {side.given} is {why}")
    replay.check_image_out(name, args.out)
    run_dir = (
        Path(args.out).resolve() if args.out else new_run_dir(f"ab-{args.preset}", args.variant)
    )
    for side in sides.values():
        into = run_dir / "outside" / side.name
        side.site = replay.outside_site(session, name, engine, side.image, side.packages, into)
    platform = platforms.of_variant(args.variant)
    env = SMOKE_ENV if platform.host_cores else {"JAX_PLATFORMS": platform.jax_platforms}
    try:
        run_rounds(engine, sides, args, run_dir, env, log=session.log)
    except UsageError as error:  # --out holds another A/B
        replay.usage(name, str(error))
    today.python("-m", "dew.bench.analysis.ab", today.path(run_dir), success_codes=(0, 1, 3))
    session.log(f"A/B: {(run_dir / 'ab.md').relative_to(ROOT)}, a.json, b.json, ab.png")
