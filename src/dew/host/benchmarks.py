"""What the benchmark sessions share: their options, the engine, base and image (a failure
as the session's one error line), and the steps they run: the step benchmark, the loader
benchmark and the comparison with a published record.

`session` is a nox.Session; nothing here imports nox (the noxfile passes its sessions in).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from dew.bench.common.arguments import OneLineParser  # standard library only
from dew.bench.common.errors import EXIT_USAGE, UsageError, say
from dew.flags import CACHE_OFF
from dew.host import image as images
from dew.host.bases import DEFAULT_BASE_IMAGE, OFFLINE_BASE_IMAGE, build_offline_base
from dew.host.engine import IMAGE_XLA_CACHE, ROOT, EngineError, choose, image_exists, pull
from dew.host.runner import Runner

SMOKE_ENV = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
# The image side of the cpu-smoke preset's samples (16x16x3, 4x16x16x3 for video).
SMOKE_IMAGE_SIZE = 16


# Set by the dew command for the nox it starts (`dew ab` runs `nox -s ab`): the command the
# user typed, which a session's error lines name.
TYPED_COMMAND = "DEW_TYPED_COMMAND"


def typed_command(session_name: str) -> str:
    """How the user started session `session_name`: `dew ab`, else `nox -s ab`."""
    return os.environ.get(TYPED_COMMAND) or f"nox -s {session_name}"


def usage(session_name: str, message: str):
    """Bad input, or a host or stack the session cannot use: one line naming the command
    typed, exit 2 (nox's own is 1)."""
    say(typed_command(session_name), message)
    raise SystemExit(EXIT_USAGE)


def last_option(args: list[str], name: str) -> str | None:
    """The value of the last `--name VALUE` or `--name=VALUE` in args (the one the tool's
    parser keeps), None when absent."""
    found = None
    for index, arg in enumerate(args):
        if arg == name and index + 1 < len(args):
            found = args[index + 1]
        elif arg.startswith(name + "="):
            found = arg.split("=", 1)[1]
    return found


def session_flags(name: str, argv, declare, tool: str = "tools/benchmark_step.py"):
    """A session's own flags out of its arguments (`declare(parser)` adds them), and the
    rest, in order, for `tool`: (namespace, rest). Bad input is one line, exit 2; `--help`
    lists the session's flags."""
    parser = OneLineParser(
        prog=f"nox -s {name} --",
        epilog=f"Every other flag goes to {tool} (its --help lists them).",
    )
    declare(parser)
    try:
        return parser.split(list(argv))
    except UsageError as error:
        usage(name, str(error))


def data_path_flag(parser: OneLineParser) -> None:
    parser.add_argument(
        "--data.path", dest="data_path", metavar="DIR",
        help="a prepared oxford_flowers102 version directory (tools/prepare_dataset.py)",
    )  # fmt: skip


def base_image_flag(parser: OneLineParser) -> None:
    parser.add_argument(
        "--base-image", default=os.environ.get("DEW_BASE_IMAGE"), metavar="REF",
        help="the base the image is built on (default: DEW_BASE_IMAGE, else dew's choice)",
    )  # fmt: skip


# --- the engine, the base and the image ----------------------------------------------------


def choose_engine(session):
    try:
        return choose()
    except EngineError as error:
        session.error(str(error))


def resolve_base(session, engine, requested: str | None) -> str | None:
    """The base image to build on. A requested one (`--base-image` or DEW_BASE_IMAGE) must
    be present or pullable. Otherwise the default if present or pullable, else the offline
    Debian base (built with debootstrap when missing); None when none can be had."""
    if requested:
        if image_exists(engine, requested) or pull(engine, requested):
            return requested
        session.error(f"base image {requested} is neither present nor pullable")
    default = DEFAULT_BASE_IMAGE
    if image_exists(engine, default):
        return default
    offline = OFFLINE_BASE_IMAGE
    if image_exists(engine, offline):
        session.log(f"using the offline base {offline} ({default} is not present)")
        return offline
    if pull(engine, default):
        return default
    if shutil.which("debootstrap") and os.geteuid() == 0:
        session.log(f"{default} cannot be pulled here: building the offline base {offline}")
        try:
            return build_offline_base(engine, log=session.log)
        except EngineError as error:
            session.error(str(error))
    return None


def build_image(session, engine, variant: str, base: str):
    try:
        return images.build_image(engine, variant, base, log=session.log)
    except EngineError as error:
        session.error(str(error))


# --- the benchmarks --------------------------------------------------------------------------


def step_benchmark(runner: Runner, run_dir: Path, preset: str, args, env) -> None:
    """tools/benchmark_step.py for the preset, then its record validated."""
    if not (ROOT / "tools" / "benchmark_step.py").exists():
        runner.session.error("tools/benchmark_step.py is missing from this checkout")
    step_json = run_dir / "step.json"
    args = [*compilation_cache_args(args, in_image=runner.engine is not None), *args]
    runner.python(
        "tools/benchmark_step.py", "--preset", preset, "--json-out", runner.path(step_json),
        "--format", "md", *args, env=env, stdout_to=run_dir / "table.md",
    )  # fmt: skip
    runner.python("-m", "dew.bench.record.validate", runner.path(step_json))
    runner.session.log(f"record: {step_json.relative_to(ROOT)}")


def compilation_cache_args(args: list[str], *, in_image: bool) -> list[str]:
    """The cache the step benchmark is given, in its command so the record shows it.

    Repeats (--repeats N > 1 or auto) are fresh compiles, `off`: XLA may choose differently
    between compiles of the same program, and repeats that load one cached executable would
    never sample that. A single run in the image keeps its executables in the mounted cache
    (the image's HOME is temporary). The user's own --compilation-cache-dir wins."""
    if last_option(args, "--compilation-cache-dir") is not None:
        return []
    repeats = last_option(args, "--repeats") or "1"
    if repeats == "auto" or (repeats.isdigit() and int(repeats) > 1):
        return ["--compilation-cache-dir", CACHE_OFF]
    return ["--compilation-cache-dir", IMAGE_XLA_CACHE] if in_image else []


def loader_benchmark(
    runner: Runner, run_dir, dataset, *, image_size=64, workers=(0, 8), against=None, args=()
) -> None:
    """tools/benchmark_data.py with the seed's settings (batch 8, 100 steps after 5) for
    `dataset` (its subcommand and flags), once per worker count (the published table's 0
    and 8) unless `args` give the workers; with the keep-up verdict against a step record."""
    if not (ROOT / "tools" / "benchmark_data.py").exists():
        runner.session.error("tools/benchmark_data.py is missing from this checkout")
    extra = ["--against", runner.path(against)] if against and against.exists() else []
    given = any(arg.startswith("--data.loading.workers") for arg in args)
    for count in [None] if given else workers:
        name = "data" if count is None else f"data-workers-{count}"
        chosen = [] if count is None else ["--data.loading.workers", str(count)]
        data_json = run_dir / f"{name}.json"
        runner.python(
            "tools/benchmark_data.py", *dataset, "--batch", "8",
            "--data.image-size", str(image_size), "--steps", "100", "--warmup", "5",
            "--json-out", runner.path(data_json), *chosen, *extra,
            *args, env={"JAX_PLATFORMS": "cpu"}, stdout_to=run_dir / f"{name}.md",
        )  # fmt: skip
        runner.python("-m", "dew.bench.record.validate", runner.path(data_json))


def compare_with_published(runner: Runner, run_dir: Path, reference=None) -> None:
    """The run against the matching published record (or `reference`): table, chart and
    the JSON of the verdicts (compare.json).
    Rows outside the noise band are a finding, not a failure of the session. `runner`
    reads records: the session's venv from locks/dev.txt, which has the report libraries
    (the measured images do not)."""
    step_json = run_dir / "step.json"
    refs = [runner.path(reference)] if reference else []
    runner.python(
        "-m", "dew.bench.analysis.compare_command", runner.path(step_json), *refs,
        "--plot", runner.path(run_dir / "compare.png"),
        stdout_to=run_dir / "compare.md", success_codes=(0, 1, 3),
    )  # fmt: skip
    # The same comparison for machines (CI, a dashboard): one JSON object.
    runner.python(
        "-m", "dew.bench.analysis.compare_command", runner.path(step_json), *refs,
        "--format", "json", stdout_to=run_dir / "compare.json", success_codes=(0, 1, 3),
    )  # fmt: skip
    # Exit 1 is also Python's own for a failure (an import, a traceback): a table is the
    # sign compare ran.
    for name in ("compare.md", "compare.json"):
        if not (run_dir / name).read_text().strip():
            runner.session.error(
                f"compare wrote no {name}: it failed (its error is above); the run's record "
                f"is {step_json.relative_to(ROOT)}"
            )
