"""dew's front door. Needs nothing but nox and the standard library: it runs before any
environment exists, and builds every environment it uses from the hash locks. Its helpers
are the standard-library modules under docker/, loaded by path as the package dew_docker."""

from __future__ import annotations

import datetime
import filecmp
import importlib.machinery
import importlib.util
import os
import pathlib
import shutil
import sys
import tempfile

import nox

ROOT = pathlib.Path(__file__).parent
LOCKS = ROOT / "locks"
PYTHON = "3.12"
UV = "uv==0.13.9"  # the lock tool is pinned like everything else
SLOWEST = 20  # the tests a run prints as its slowest: where the suite's time goes

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests"]


def load(name: str, path: pathlib.Path):
    """A standard-library module by its file path, loaded once (docker/ and tests/infra/
    are on no sys.path); a directory becomes a package whose modules import each other
    relatively. Registered in sys.modules: dataclasses look their module up by name."""
    if name not in sys.modules:
        if path.is_dir():
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(path)]
        else:
            spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        if spec.loader is not None:
            spec.loader.exec_module(module)
    return sys.modules[name]


# docker/ as the package dew_docker; it and this file use dew's standard-library modules
# (dew.bench.common, record.stack, multihost.kubernetes) from src/.
sys.path.insert(0, str(ROOT / "src"))
load("dew_docker", ROOT / "docker")
from dew_docker import base as bases  # noqa: E402
from dew_docker import bench_gpu as gpu_bench  # noqa: E402
from dew_docker import benchmarks as bench  # noqa: E402
from dew_docker import engine as containers  # noqa: E402
from dew_docker import reproduce as replay  # noqa: E402
from dew_docker import smoke  # noqa: E402
from dew_docker import stacks as stack_images  # noqa: E402
from dew_docker.ab import parse_ab, resolve_side, run_rounds  # noqa: E402
from dew_docker.gpu import gpu_visible_in_image  # noqa: E402
from dew_docker.outside import site_env, site_mounts  # noqa: E402
from dew_docker.runner import Runner, new_run_dir  # noqa: E402

from dew.bench.common.files import atomic_write  # noqa: E402  (dew's one atomic writer)
from dew.bench.multihost import kubernetes as k8s  # noqa: E402

# What each lock installs. cpu, cuda12 and cuda13 are the measured stacks (the images):
# what a measurement imports, nothing more. dev is the host's: the same runtime plus the
# report libraries and the test tools.
LOCK_EXTRAS = {"cpu": [], "cuda12": ["cuda12"], "cuda13": ["cuda13"], "dev": ["dev", "report"]}
# CPython on x86_64 Linux with manylinux wheels. uv writes the hashes of every wheel of
# each pinned version, so the cpu lock also installs on Debian trixie's Python 3.13.
LOCK_TARGET = ["--python-version", PYTHON, "--python-platform", "x86_64-manylinux_2_28"]


def install_locked(session: nox.Session, variant: str = "dev") -> None:
    """The venv from `locks/<variant>.txt` with --require-hashes, then dew without deps."""
    session.install("--require-hashes", "--no-deps", "-r", str(LOCKS / f"{variant}.txt"))
    session.install("--no-deps", "--no-build-isolation", "-e", str(ROOT))


def compile_lock(session: nox.Session, variant: str, output: pathlib.Path) -> None:
    extras = [arg for extra in LOCK_EXTRAS[variant] for arg in ("--extra", extra)]
    session.run(
        "uv", "pip", "compile", "pyproject.toml", *extras, *LOCK_TARGET,
        "--generate-hashes", "--no-header", "--no-annotate", "--quiet",
        "--output-file", str(output),
        env={"UV_CUSTOM_COMPILE_COMMAND": "nox -s lock"},
    )  # fmt: skip


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The test suite on CPU (8 simulated devices), in a venv built from locks/dev.txt,
    without the slow tier (tests/conftest.py says which tests are in it); every run ends
    with its slowest tests."""
    install_locked(session)
    session.run("pytest", "-m", "not slow", f"--durations={SLOWEST}", *session.posargs)


@nox.session(name="tests-full", python=PYTHON)
def tests_full(session: nox.Session) -> None:
    """Every test, the slow tier included (`-- -m slow`: that tier alone, as CI runs it)."""
    install_locked(session)
    session.run("pytest", f"--durations={SLOWEST}", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff over the package, tools, tests and this file; hadolint over the Dockerfile."""
    install_locked(session)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("hadolint", "docker/Dockerfile")


@nox.session(python=PYTHON)
def lock(session: nox.Session) -> None:
    """Regenerate locks/{cpu,cuda12,cuda13,dev}.txt; `-- --check` fails on a stale lock."""
    session.install(UV)
    check = "--check" in session.posargs
    LOCKS.mkdir(exist_ok=True)
    stale = []
    for variant in LOCK_EXTRAS:
        target = LOCKS / f"{variant}.txt"
        if not check:
            compile_lock(session, variant, target)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            fresh = pathlib.Path(tmp) / target.name
            if target.exists():  # uv keeps the pins it finds: only a pyproject change moves them
                shutil.copyfile(target, fresh)
            compile_lock(session, variant, fresh)
            if not target.exists() or not filecmp.cmp(fresh, target, shallow=False):
                stale.append(target.relative_to(ROOT))
    if stale:
        names = ", ".join(str(path) for path in stale)
        session.error(f"stale lock: {names} no longer matches pyproject.toml; run `nox -s lock`")
    if check:
        print("locks match pyproject.toml", file=sys.stderr)


@nox.session(python=PYTHON)
def validate(session: nox.Session) -> None:
    """Validate results records: `nox -s validate -- FILES...`."""
    install_locked(session)
    session.run("python", "-m", "dew.bench.record.validate", *session.posargs)


@nox.session(python=PYTHON)
def compare(session: nox.Session) -> None:
    """Hold a run against a reference: `nox -s compare -- RUN.json [REFERENCE.json] ...`."""
    install_locked(session)
    session.run("python", "-m", "dew.bench.analysis.compare_command", *session.posargs)


@nox.session(python=PYTHON)
def schema(session: nox.Session) -> None:
    """Export the results JSON Schema to results/schema/."""
    install_locked(session)
    session.run("python", "-m", "dew.bench.record.schema", "--export", "results/schema")


# --- containers and benchmark sessions ----------------------------------------------------


@nox.session(name="base-image", python=False)
def base_image(session: nox.Session) -> None:
    """The offline base (Debian trixie, Python 3.13) from this machine's apt archive."""
    engine = bench.choose_engine(session)
    if engine is None:
        session.error("base-image needs podman or docker: `apt-get install podman runc`")
    try:
        ref = bases.build_offline_base(engine, log=session.log)
        session.log(f"{ref} {containers.base_digest(engine, ref)}")
    except containers.EngineError as error:
        session.error(str(error))


@nox.session(name="cpu-smoke", python=PYTHON)
def cpu_smoke(session: nox.Session) -> None:
    """Tiny models of every architecture on 8 simulated CPU devices, in the cpu image, then
    the loader on a synthetic ArrayRecord set at their image size, with the keep-up verdict.

    `-- [--base-image REF] [benchmark_step.py flags]`; DEW_ENGINE=docker|podman|none.
    """
    args = list(session.posargs)
    engine, base = smoke.engine_and_base(session, args)
    if engine is None or base is None:
        why = smoke.no_image_reason(engine)
        session.log(f"{why}: running in a nox venv from locks/dev.txt (container: null)")
        install_locked(session)
        runner = Runner(session)
    else:
        runner = Runner(session, engine, bench.build_image(session, engine, "cpu", base))
    smoke.smoke(runner, new_run_dir("cpu-smoke", "cpu"), args)


@nox.session(name="cuda-smoke", python=False)
def cuda_smoke(session: nox.Session) -> None:
    """The CUDA image proven without a GPU: built from its lock (on the offline base where
    no registry answers), then cpu-smoke inside it with JAX_PLATFORMS=cpu on three
    architectures, the loader and validate; the record must name the image and its CUDA wheels.

    `-- [cuda12|cuda13] [--base-image REF] [benchmark_step.py flags]` (default cuda13).
    """
    variant, args = smoke.cuda_arguments(session.posargs)
    engine, image = smoke.cuda_image(session, variant, args)
    run_dir = new_run_dir("cuda-smoke", variant)
    smoke.smoke(Runner(session, engine, image), run_dir, args)
    smoke.verify_cuda_record(session, run_dir / "step.json", image)


@nox.session(name="multihost-smoke", python=PYTHON)
def multihost_smoke(session: nox.Session) -> None:
    """cpu-smoke as N processes on loopback (JAX's distributed runtime, gloo), record checked.

    `-- [--processes N] [benchmark_step.py flags]`; N (default 2) divides 8 simulated devices.
    """
    install_locked(session)
    args = list(session.posargs)
    processes = bench.pop_option(args, "--processes", "2")
    run_dir = new_run_dir("multihost-smoke", "cpu")
    session.run(
        "python", "-m", "dew.bench.multihost.launch", "--processes", processes,
        "--json-out", str(run_dir / "step.json"), "--log-dir", str(run_dir / "logs"),
        "--", "--preset", "cpu-smoke", "--steps", "2", "--idle-check", "warn", *args,
    )  # fmt: skip
    session.log(f"record: {(run_dir / 'step.json').relative_to(ROOT)}")


@nox.session(name="slurm-smoke", python=PYTHON)
def slurm_smoke(session: nox.Session) -> None:
    """cpu-smoke submitted to SLURM as 2 tasks x 4 simulated CPU devices (JAX's SLURM
    detection forms the mesh), the job waited for and its record checked.

    The host's SLURM when `sinfo` answers; else a throwaway one-node cluster (slurm-wlm and
    munge installed when missing, as root), stopped and removed afterwards whatever happens.
    `-- [benchmark_step.py flags]` (default `--architectures simple_dit`, 2 steps).
    """
    slurm = load("dew_slurm_cluster", ROOT / "tests" / "infra" / "slurm_cluster.py")
    install_locked(session)
    args = ["--steps", "2", "--idle-check", "off"]
    args += session.posargs or ["--architectures", "simple_dit"]
    run_dir = new_run_dir("slurm-smoke", "cpu")
    started = datetime.datetime.now(datetime.UTC)
    try:
        with slurm.scheduler(log=session.log) as scheduler:
            job = scheduler.submit(
                slurm.CPU_RECIPE, args, output=run_dir / "slurm-job-%j.out",
                env={"DEW_PYTHON": str(pathlib.Path(session.bin) / "python"),
                     "DEW_RESULTS": str(run_dir)},
            )  # fmt: skip
            recipe = slurm.CPU_RECIPE.relative_to(ROOT)
            session.log(f"SLURM job {job.id}: {recipe} {' '.join(args)}")
            code = job.wait()
    except slurm.SlurmError as error:
        session.error(str(error))
    output = run_dir / f"slurm-job-{job.id}.out"
    print(slurm.output_tail(output))
    if code != 0:
        session.error(f"SLURM job {job.id} exited {code}; its output: {output.relative_to(ROOT)}")
    record = slurm.record_path(run_dir, job.id)
    session.run("python", "-m", "dew.bench.record.validate", str(record))
    problem = slurm.check_record(record, processes=2, job_id=job.id)
    if problem:
        session.error(problem)
    wall = (datetime.datetime.now(datetime.UTC) - started).total_seconds()
    session.log(f"record: {record.relative_to(ROOT)} (2 processes, job {job.id}), {wall:.0f} s")


@nox.session(name="k8s-manifests", python=False)
def k8s_manifests(session: nox.Session) -> None:
    """A multi-host run as Kubernetes manifests, no venv: dew.bench.multihost.kubernetes."""
    k8s.main(session.posargs, exit_on_error=True)  # bad input: one line, exit 2 (nox's is 1)


@nox.session(name="bench-gpu", python=PYTHON)
def bench_gpu(session: nox.Session) -> None:
    """The small preset on the GPU, one process per architecture, in the CUDA image.

    The host's checks (the NVIDIA toolkit or CDI spec too) before the build, the GPU seen in
    the image, the step benchmark (3 repeats, each a fresh compile), the loader, compare.

    `-- [--variant cuda13|cuda12] [--base-image REF] [--data.path DIR] [benchmark_step flags]`
    The comparison with the published record runs in the session's venv (locks/dev.txt).
    """
    gpu_bench.bench_gpu(session, lambda: _today_runner(session))


@nox.session(name="bench-data", python=PYTHON)
def bench_data(session: nox.Session) -> None:
    """The loader benchmark: `-- --data.path DIR [benchmark_data.py flags]`.

    In the cpu image when an engine answers, else in a nox venv from locks/dev.txt.
    """
    args = list(session.posargs)
    data_path = bench.pop_option(args, "--data.path")
    if not data_path or not pathlib.Path(data_path).is_dir():
        session.error(
            f"--data.path {data_path or '(missing)'} is not a directory: give a prepared "
            "oxford_flowers102 version directory (tools/prepare_dataset.py --source DIR "
            "--out DIR; a --synthetic set runs as data:synthetic-images)"
        )
    engine = bench.choose_engine(session)
    base = bench.resolve_base(session, engine, os.environ.get("DEW_BASE_IMAGE")) if engine else None
    if engine is None or base is None:
        session.log("no container engine or base: running in a nox venv from locks/dev.txt")
        install_locked(session)
        runner, inside = Runner(session), str(pathlib.Path(data_path).resolve())
    else:
        mounts = [(pathlib.Path(data_path), "/data", "ro")]
        image = bench.build_image(session, engine, "cpu", base)
        runner, inside = Runner(session, engine, image, mounts=mounts), "/data"
    flowers = ["data:oxford-flowers", "--data.path", inside]
    bench.loader_benchmark(runner, new_run_dir("data", "cpu"), flowers, args=args)


@nox.session(python=PYTHON)
def report(session: nox.Session) -> None:
    """Every record under results/ as a static site: `-- [DIRS...] [--out results/site]`.

    Opens from disk (results/site/index.html): the latest ms/step per architecture, device
    and stack, each architecture's history with its change points, a page per record.
    """
    install_locked(session)
    session.run("python", "-m", "dew.bench.site", *session.posargs)


@nox.session(python=PYTHON)
def reproduce(session: nox.Session) -> None:
    """Rerun a step record on its own stack, then compare: `-- RECORD.json [--outside SRC]...
    [--interleaved N]`. The record's stack as an image (docker/stacks.py: its commit, lock,
    Dockerfile and base) runs that commit's own tool with the record's cases and settings;
    today's compare holds the new record against the old one. A stack that cannot be built
    (no commit; a dirty tree; a commit this clone lacks) is listed part by part, then one
    line, exit 2. `--outside`: the git checkout (built at the record's commit), folder or
    wheel of code from outside dew (docs/own-models.md). `--interleaved N`: the record's
    stack and today's (HEAD) in N paired rounds instead (ab's design: the run level cancels).
    """
    record_path, sources, rounds = replay.parse_reproduce(session.posargs)
    record, settings, environment = replay.read_step_record("reproduce", record_path)
    if rounds:  # the record's stack and today's in paired rounds: the run level cancels
        return _ab(session, replay.interleaved_args(record_path, settings, sources, rounds))
    matched, unmatched = stack_images.stack_parts(record)
    try:
        spec = stack_images.spec_from_record(record, f"record {record_path.name}")
    except containers.EngineError as error:
        for line in matched:
            session.log(f"matches: {line}")
        for line in unmatched:
            session.log(f"cannot match: {line}")
        replay.usage("reproduce", str(error))
    today = _today_runner(session)  # its setuptools builds the outside code's wheels
    origin = f"record {record_path.name}"
    packages, outside_lines = replay.outside_wheels(
        session, "reproduce", sources, environment, origin, replay.scratch_dir()
    )
    engine = replay.engine_for(session, "reproduce", spec.variant)
    image, base_lines = replay.materialise_all(session, "reproduce", engine, [spec])[0]
    unmatched = base_lines + replay.not_matched(environment, image) + outside_lines
    for line in unmatched:
        session.log(f"not matched: {line}")
    on_gpu = spec.variant != "cpu"
    if on_gpu:
        gpu_visible_in_image(session, engine, image)
    run_dir = new_run_dir(f"reproduce-{settings.get('preset') or 'cases'}", spec.variant)
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
    bench.compare_with_published(today, run_dir, reference=reference)
    session.log(f"record: {step_json.relative_to(ROOT)} (commit {spec.commit[:7]}, {image.ref})")


@nox.session(python=PYTHON)
def ab(session: nox.Session) -> None:
    """Two stacks timed side by side on this host in paired, interleaved rounds.

    `-- A B [--rounds R] [--preset P] (--architectures NAME... | --cases JSON)
    [--step MODULE:FACTORY]... [--steps N] [--warmup N] [--variant cpu|cuda12|cuda13]
    [--outside SRC]... [--a-outside SRC]... [--b-outside SRC]... [--a-env K=V] [--b-env K=V]
    [--a-xla-flags FLAGS] [--b-xla-flags FLAGS] [--band PCT] [--alpha A]`: A and B are each
    a commit, a record (its stack) or an image; code from outside dew (a git checkout at
    PATH@REV, a folder or a wheel) is installed beside each side's stack, --outside on both
    sides, --a-outside or --b-outside on one. Every round runs every case once per side,
    each in a fresh process, alternating which side goes first; then one record per side
    and the A/B table of the paired per-round ratios (dew.bench.analysis.ab), markdown and chart.
    """
    _ab(session, session.posargs)


def _ab(session: nox.Session, posargs: list[str]) -> None:
    try:
        args = parse_ab(posargs)
    except containers.EngineError as error:
        replay.usage("ab", str(error))
    engine = replay.engine_for(session, "ab", args.variant)
    try:
        sides = {
            name: resolve_side(engine, name, given, args.variant)
            for name, given in (("A", args.a), ("B", args.b))
        }
    except containers.EngineError as error:
        replay.usage("ab", str(error))
    today = _today_runner(session)  # its setuptools builds the outside code's wheels
    for side in sides.values():
        side.packages, lines = replay.outside_wheels(
            session, "ab", args.outside[side.name], side.environment, f"{side.name} {side.given}",
            replay.scratch_dir(),
        )  # fmt: skip
        for line in lines:
            session.log(f"{side.name} not matched: {line}")
    to_build = [side for side in sides.values() if side.image is None]
    made = replay.materialise_all(session, "ab", engine, [side.spec for side in to_build])
    for side, (image, lines) in zip(to_build, made, strict=True):
        side.image = image
        for line in lines:
            session.log(f"{side.name} not matched: {line}")
    for side in sides.values():
        if side.image.variant != args.variant:
            why = f"a {side.image.variant} image, not {args.variant} (--variant)"
            replay.usage("ab", f"{side.name} {side.given} is {why}")
    run_dir = new_run_dir(f"ab-{args.preset}", args.variant)
    for side in sides.values():
        into = run_dir / "outside" / side.name
        side.site = replay.outside_site(session, "ab", engine, side.image, side.packages, into)
    env = bench.SMOKE_ENV if args.variant == "cpu" else {"JAX_PLATFORMS": "cuda"}
    run_rounds(engine, sides, args, run_dir, env, log=session.log)
    today.python("-m", "dew.bench.analysis.ab", today.path(run_dir), success_codes=(0, 1, 3))
    session.log(f"A/B: {(run_dir / 'ab.md').relative_to(ROOT)}, a.json, b.json, ab.png")


def _today_runner(session: nox.Session) -> Runner:
    """The checkout's own record readers (validate, compare, the A/B table and chart) in the
    session's venv from locks/dev.txt: the report libraries are not in the measured images.
    Its setuptools also builds the wheels of code from outside dew (dew_docker.outside)."""
    install_locked(session)
    return Runner(session)
