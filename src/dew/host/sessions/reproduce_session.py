"""Rerun a step record on its own stack, then compare (`nox -s reproduce`).

The record's stack as an image (dew.host.stack_images: its commit, lock, Dockerfile and
base) runs that commit's own tool with the record's cases and settings; today's compare
holds the new record against the old one. A stack that cannot be built (no commit; a dirty
tree; a commit this clone lacks) is listed part by part, then one line, exit 2.
`--outside`: the git checkout (built at the record's commit), folder or wheel of code from
outside dew (docs/own-models.md). `--interleaved N`: the record's stack and today's (HEAD)
in N paired rounds instead (ab's design: the run level cancels). A TPU record is rerun on a
TPU host by `dew reproduce` itself, with no nox or image (dew.commands.on_chip: --dew,
--accept-stack-difference, --out).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from dew import platforms
from dew.bench.common.files import atomic_write  # dew's one atomic writer; standard library only
from dew.host import replay, stack_images
from dew.host.benchmarks import compare_with_published
from dew.host.engine import EngineError
from dew.host.gpu_checks import gpu_visible_in_image
from dew.host.outside_sources import site_env, site_mounts
from dew.host.runner import Runner, new_run_dir
from dew.host.sessions.ab_session import ab
from dew.host.sessions.ab_session import check_arguments as check_arguments_ab
from dew.host.venvs import today_runner


def help_text(prog: str = "nox -s reproduce --") -> str:
    """The session's --help: every flag, then what it does."""
    return replay.reproduce_parser(prog, __doc__).format_help()


def check_arguments(argv: list[str], python: str) -> None:
    """Every argument checked before nox starts (the dew command's): the one record, a step
    record whose stack this host can build (stack_images.spec_from_record: a commit of this
    clone, a clean tree, an image's stack), and with --interleaved the A/B it becomes; one
    line, exit 2."""
    record_path, sources, rounds = replay.parse_reproduce(argv)
    record, settings, _ = replay.read_step_record("reproduce", record_path)
    replay.check_image_out("reproduce", replay.reproduce_parser("reproduce").parse(argv).out)
    tpu_only = replay.tpu_only_flags(argv)
    if tpu_only:  # the record has an image's stack: nothing of a TPU host's to take
        replay.usage(
            "reproduce",
            f"{', '.join(tpu_only)}: only for a TPU record rerun on a TPU host; RECORD "
            f"{record_path}'s stack is rebuilt as an image",
        )
    try:
        stack_images.spec_from_record(record, f"RECORD {record_path}")
    except EngineError as error:
        replay.usage("reproduce", str(error))
    if rounds:
        argv = replay.interleaved_args(record_path, settings, sources, rounds)
        check_arguments_ab(argv, python, name="reproduce")


def reproduce(session) -> None:
    """The session: `-- RECORD.json [--outside SRC]... [--interleaved N]`; `-- --help`
    prints help_text()."""
    if {"-h", "--help"} & set(session.posargs):
        return print(help_text(), end="")
    record_path, sources, rounds = replay.parse_reproduce(session.posargs)
    record, settings, environment = replay.read_step_record("reproduce", record_path)
    if rounds:  # the record's stack and today's in paired rounds: the run level cancels
        argv = replay.interleaved_args(record_path, settings, sources, rounds)
        return ab(session, argv, name="reproduce")
    matched, unmatched = stack_images.stack_parts(record)
    try:
        spec = stack_images.spec_from_record(record, f"record {record_path.name}")
    except EngineError as error:
        for line in matched:
            session.log(f"matches: {line}")
        for line in unmatched:
            session.log(f"cannot match: {line}")
        replay.usage("reproduce", str(error))
    today = today_runner(session)  # its setuptools builds the outside code's wheels
    origin = f"record {record_path.name}"
    packages, outside_lines = replay.outside_wheels(
        session, "reproduce", sources, environment, origin, replay.scratch_dir()
    )
    engine = replay.engine_for(session, "reproduce", spec.variant)
    image, base_lines = replay.materialise_all(session, "reproduce", engine, [spec])[0]
    unmatched = base_lines + replay.not_matched(environment, image) + outside_lines
    for line in unmatched:
        session.log(f"not matched: {line}")
    on_gpu = platforms.of_variant(spec.variant).nvml
    if on_gpu:
        gpu_visible_in_image(session, engine, image)
    out = replay.reproduce_parser("reproduce").parse(session.posargs).out
    replay.check_image_out("reproduce", out)
    run_dir = Path(out).resolve() if out else None
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
    run_dir = run_dir or new_run_dir(f"reproduce-{settings.get('preset') or 'cases'}", spec.variant)
    site = replay.outside_site(session, "reproduce", engine, image, packages, run_dir / "outside")
    runner = Runner(session, engine, image, gpu=on_gpu, mounts=site_mounts(site))
    if unmatched:
        atomic_write(run_dir / "not-matched.txt", "\n".join(unmatched) + "\n")
    step_json = run_dir / "step.json"
    args = stack_images.settings_args(settings) + ["--format", "md", "--idle-check"]
    args += ["error" if on_gpu else "warn"]
    session.log(f"{spec.commit[:7]}'s own tool in {image.ref}: {' '.join(args)}")
    runner.python(
        "tools/benchmark_step.py", *args, "--json-out", runner.path(step_json),
        env={**(environment.get("env_flags") or {}), **site_env(site)},
        stdout_to=run_dir / "table.md",
        success_codes=(0, 1),
    )  # fmt: skip
    reference = run_dir / "reference.json"  # kept beside the rerun it judges
    shutil.copyfile(record_path, reference)
    today.python("-m", "dew.bench.record.validate", today.path(step_json))  # today's judge
    compare_with_published(today, run_dir, reference=reference)
    session.log(f"record: {step_json} (commit {spec.commit[:7]}, {image.ref})")
