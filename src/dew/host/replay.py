"""The plumbing of `nox -s reproduce` and `nox -s ab`: the step record read, the engine a
stack needs, the stacks' images (removed again when one fails), and what of a record's
stack the rebuilt image and this host do not match. Bad input, or a stack that cannot be
built, is one line and exit 2 (`usage`).

`session` is a nox.Session; nothing here imports nox.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path

from dew import platforms
from dew.bench.common.arguments import OneLineParser
from dew.bench.common.errors import UsageError
from dew.bench.common.files import read_json_object
from dew.bench.record import stack
from dew.host.bases import DEFAULT_BASE_IMAGE
from dew.host.benchmarks import choose_engine, resolve_base, usage
from dew.host.engine import ROOT, EngineError
from dew.host.gpu_checks import gpu_here, gpu_preflight
from dew.host.outside_sources import Package, install, keep, prepare_all
from dew.host.stack_images import Unreproducible, choose_base, materialise, remove_built


def reproduce_parser(prog: str, description: str = "") -> OneLineParser:
    """`reproduce RECORD.json [--outside SOURCE]... [--interleaved ROUNDS]`; a TPU record on a
    TPU host: `reproduce RECORD.json [--dew DIR] [--accept-stack-difference] [--out DIR]`."""
    # One record: nargs="*" only so that two are refused in reproduce's own words.
    usage = (f"{prog} [-h] [--outside PATH[@REV]|WHEEL]... [--interleaved N] [--out DIR] "
             "[--dew DIR] [--accept-stack-difference] RECORD.json")  # fmt: skip
    parser = OneLineParser(prog=prog, description=description, usage=usage)
    parser.add_argument(
        "record", nargs="*", metavar="RECORD.json", help="the step record to rerun (one)"
    )
    parser.add_argument(
        "--outside", action="append", default=[], metavar="PATH[@REV]|WHEEL",
        help="code from outside dew the record's rows used: a git checkout (built at the "
        "record's commit), a folder or a wheel; once per package",
    )  # fmt: skip
    parser.add_argument(
        "--interleaved", type=_rounds, metavar="N",
        help="the record's stack and today's (HEAD) in N >= 2 paired rounds (nox -s ab)",
    )  # fmt: skip
    tpu = parser.add_argument_group("a TPU record, on a TPU host (no nox, no image)")
    tpu.add_argument(
        "--dew", metavar="DIR", help="the dew that reruns it: a bundle built at the record's "
        "commit, installed by its install.py --target DIR (default: this dew)",
    )  # fmt: skip
    tpu.add_argument(
        "--accept-stack-difference", action="store_true", help="rerun it where this host's "
        "Python, jax, jaxlib, libtpu or device, or the dew, is not the record's; the "
        "differences are written into the new record's note",
    )  # fmt: skip
    parser.add_argument(
        "--out", metavar="DIR", help="the rerun's folder (default: a new one under "
        "results/runs); on a TPU host one that holds a step.json is continued (the step "
        "tool's --resume)",
    )  # fmt: skip
    return parser


def _rounds(value: str) -> int:
    if not value.isdigit() or int(value) < 2:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of rounds >= 2")
    return int(value)


def parse_reproduce(argv: list[str]) -> tuple[Path, list[str], int | None]:
    """`nox -s reproduce -- RECORD [--outside SOURCE]... [--interleaved ROUNDS]`: the
    record, the sources of the code from outside dew its rows used, and the paired rounds
    asked for (None: rerun the record's stack and hold it against the record); or one line
    and exit 2."""
    try:
        args = reproduce_parser("reproduce").parse(argv)
    except UsageError as error:
        usage("reproduce", str(error))
    if len(args.record) != 1:
        usage("reproduce", f"takes one step record (a JSON file), got {len(args.record)}")
    return Path(args.record[0]), args.outside, args.interleaved


def check_image_out(prog: str, out: str | None) -> None:
    """--out of a run in an image: a folder under the checkout's results/, the one folder the
    image writes into (dew.host.runner); else one line, exit 2."""
    results = ROOT / "results"
    if out and not Path(out).resolve().is_relative_to(results.resolve()):
        usage(prog, f"--out {out}: a run in an image writes under {results} only; give a "
                    "folder there (a TPU host's run, which has no image, takes any)")  # fmt: skip


def tpu_only_flags(argv: list[str]) -> list[str]:
    """The flags given that only a TPU record's rerun on a TPU host takes."""
    args = reproduce_parser("reproduce").parse(argv)
    given = {"--dew": args.dew, "--accept-stack-difference": args.accept_stack_difference}
    return [flag for flag, value in given.items() if value]


def interleaved_args(record_path: Path, settings: dict, sources: list[str], rounds: int):
    """`nox -s ab`'s arguments for reproduce --interleaved: A the record's own stack, B
    today's (HEAD), the record's cases and settings on both, in `rounds` paired rounds, so
    the run level between them cancels instead of being assumed."""
    args = [str(record_path), "HEAD", "--rounds", str(rounds)]
    for name in ("preset", "steps", "warmup"):
        if settings.get(name) is not None:
            args += [f"--{name}", str(settings[name])]
    args += ["--cases", json.dumps(settings["cases"])] if settings.get("cases") else []
    flags = (settings.get("options") or {}).get("xla_flags")
    args += [f"--a-xla-flags={flags}", f"--b-xla-flags={flags}"] if flags else []
    return args + [arg for source in sources for arg in ("--outside", source)]


def read_step_record(prog: str, path: Path) -> tuple[dict, dict, dict]:
    """The step record at `path` (a results record's JSON), its settings and environment;
    or one line and exit 2."""
    try:
        record = json.loads(read_json_object(path, "RECORD"))
    except UsageError as error:
        usage(prog, str(error))
    if record.get("kind") != "step":
        what = f"a {record['kind']!r} record" if isinstance(record.get("kind"), str) else (
            "no results record (it has no kind)")  # fmt: skip
        usage(prog, f"RECORD {path} is {what}; reproduce takes a step record (dew step's "
                    "--json-out)")  # fmt: skip
    for part in ("settings", "environment"):
        if not isinstance(record.get(part), dict):
            usage(prog, f"RECORD {path} is no results record: its {part!r} is missing or not "
                        "an object (dew validate names every problem)")  # fmt: skip
    return record, record["settings"], record["environment"]


def engine_for(session, prog: str, variant: str):
    if not platforms.of_variant(variant).host_cores:  # a device's stack: its checks first
        return gpu_preflight(session, variant)[0]
    engine = choose_engine(session)
    if engine is None:
        usage(prog, "building a stack needs podman or docker (`apt-get install podman runc`)")
    return engine


def materialise_all(session, prog: str, engine, specs) -> list[tuple[object, list]]:
    """Each spec's image and what of its recorded base it does not match; on any failure the
    images built here are removed (worktrees are gone already), then one line, exit 2."""
    built, made = [], []

    def default_base():
        base = resolve_base(session, engine, os.environ.get("DEW_BASE_IMAGE"))
        if base is None:
            raise EngineError(f"no base image: pull {DEFAULT_BASE_IMAGE} "
                              "or install debootstrap (nox -s base-image)")  # fmt: skip
        return base

    try:
        for spec in specs:
            base, lines = choose_base(engine, spec, default_base, log=session.log)
            made.append((materialise(engine, spec, base, built, log=session.log), lines))
    except (EngineError, OSError) as error:
        remove_built(engine, built)
        usage(prog, str(error))
    return made


def not_matched(environment: dict, image) -> list[str]:
    """What of the record's stack the materialised image (or this host) does not match."""
    return stack.rebuild_differences(environment, image.container(), gpu_here)


def outside_wheels(
    session,
    prog: str,
    sources: list[str],
    environment: dict | None,
    origin: str,
    scratch: Path,
) -> tuple[list[Package], list[str]]:
    """The wheels of the code from outside dew (outside_sources.py), built before any image
    so that a bad source costs no build; and what of a record's outside packages they do not
    match. The session's venv builds them (the caller installed its lock: setuptools)."""
    python = str(Path(session.bin) / "python") if sources else ""  # nothing to build: unused
    try:
        return prepare_all(sources, scratch, python, environment, origin)
    except (Unreproducible, OSError) as error:
        usage(prog, str(error))


def outside_site(
    session, prog: str, engine, image, packages: list[Package], into: Path
) -> Path | None:
    """The packages installed by the image's pip into `into`/site (their wheels kept in
    `into`/wheels); None when there are none."""
    if not packages:
        return None
    keep(packages, into / "wheels")
    site = into / "site"
    try:
        install(engine, image, packages, site)
    except (Unreproducible, OSError) as error:
        usage(prog, str(error))
    for package in packages:
        session.log(f"outside dew: {package.label()} from {package.given}, in {site}")
    return site


def scratch_dir() -> Path:
    """A folder for wheels until the run's own folder exists (removed with the process)."""
    path = Path(tempfile.mkdtemp(prefix="dew-outside-"))
    atexit.register(shutil.rmtree, path, True)
    return path
