"""dew's front door. Needs nothing but nox and the standard library: it runs before any
environment exists, and builds every environment it uses from the hash locks."""

from __future__ import annotations

import datetime
import filecmp
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import nox

ROOT = pathlib.Path(__file__).parent
LOCKS = ROOT / "locks"
PYTHON = "3.12"
UV = "uv==0.13.9"  # the lock tool is pinned like everything else

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests"]


def _load_engine_helper():
    """docker/engine.py, the stdlib-only container helper (docker/ is not a package)."""
    spec = importlib.util.spec_from_file_location("dew_engine", ROOT / "docker" / "engine.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


containers = _load_engine_helper()

# dew's one atomic writer; dew.bench.common.files imports the standard library only, so the front
# door can use it before any environment exists.
sys.path.insert(0, str(ROOT / "src"))
from dew.bench.common import files as atomic_files  # noqa: E402

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
    """The test suite on CPU (8 simulated devices), in a venv built from locks/cpu.txt,
    without the slow tier (tests/conftest.py says which tests are in it)."""
    install_locked(session)
    session.run("pytest", "-m", "not slow", *session.posargs)


@nox.session(name="tests-full", python=PYTHON)
def tests_full(session: nox.Session) -> None:
    """Every test, the slow tier included: each architecture's small-preset compile and
    cpu-smoke training run, and the multi-process launches."""
    install_locked(session)
    session.run("pytest", *session.posargs)


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


# --- results tools (dew.bench.record.validate / compare / schema) -------------------------------


@nox.session(python=PYTHON)
def validate(session: nox.Session) -> None:
    """Validate results records: `nox -s validate -- FILES...`."""
    install_locked(session)
    session.run("python", "-m", "dew.bench.record.validate", *session.posargs)


@nox.session(python=PYTHON)
def compare(session: nox.Session) -> None:
    """Hold a run against a reference: `nox -s compare -- RUN.json [REFERENCE.json] ...`."""
    install_locked(session)
    session.run("python", "-m", "dew.bench.analysis.compare", *session.posargs)


@nox.session(python=PYTHON)
def schema(session: nox.Session) -> None:
    """Export the results JSON Schema to results/schema/."""
    install_locked(session)
    session.run("python", "-m", "dew.bench.record.schema", "--export", "results/schema")


# --- containers and benchmark sessions ----------------------------------------------------

SMOKE_ENV = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
# The image side of the cpu-smoke preset's samples (16x16x3, 4x16x16x3 for video).
SMOKE_IMAGE_SIZE = 16
# The oldest driver each CUDA variant's wheels run on.
MIN_DRIVER = {"cuda12": 525, "cuda13": 580}


def _fail(session: nox.Session, error: Exception) -> None:
    session.error(str(error))


def pop_option(args: list[str], name: str, default: str | None = None) -> str | None:
    """Remove `--name VALUE` or `--name=VALUE` from args and return VALUE."""
    for index, arg in enumerate(args):
        if arg == name and index + 1 < len(args):
            value = args[index + 1]
            del args[index : index + 2]
            return value
        if arg.startswith(name + "="):
            del args[index]
            return arg.split("=", 1)[1]
    return default


def choose_engine(session: nox.Session):
    try:
        return containers.choose()
    except containers.EngineError as error:
        _fail(session, error)


def resolve_base(session: nox.Session, engine, requested: str | None) -> str | None:
    """The base image to build on. A requested one (`--base-image` or DEW_BASE_IMAGE) must
    be present or pullable. Otherwise the default if present or pullable, else the offline
    Debian base (built with debootstrap when missing); None when none can be had."""
    if requested:
        if containers.image_exists(engine, requested) or containers.pull(engine, requested):
            return requested
        session.error(f"base image {requested} is neither present nor pullable")
    default = containers.DEFAULT_BASE_IMAGE
    if containers.image_exists(engine, default):
        return default
    offline = containers.OFFLINE_BASE_IMAGE
    if containers.image_exists(engine, offline):
        session.log(f"using the offline base {offline} ({default} is not present)")
        return offline
    if containers.pull(engine, default):
        return default
    if shutil.which("debootstrap") and os.geteuid() == 0:
        session.log(f"{default} cannot be pulled here: building the offline base {offline}")
        try:
            return containers.build_offline_base(engine, log=session.log)
        except containers.EngineError as error:
            _fail(session, error)
    return None


def build_image(session: nox.Session, engine, variant: str, base: str):
    try:
        return containers.build_image(engine, variant, base, log=session.log)
    except containers.EngineError as error:
        _fail(session, error)


def new_run_dir(preset: str, device: str) -> pathlib.Path:
    """results/runs/<date>-<preset>-<device>-<commit>/, new for every run."""
    commit, dirty = containers.git_commit()
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    short = (commit or "nocommit")[:7] + ("-dirty" if dirty else "")
    device = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    run_dir = ROOT / "results" / "runs" / f"{stamp}-{preset}-{device}-{short}"
    run_dir.mkdir(parents=True)
    return run_dir


class Runner:
    """Runs `python ...` from the checkout root: in the image, or (engine none) in the
    session's venv. Paths under results/ are given as host paths and mapped."""

    def __init__(self, session: nox.Session, engine=None, image=None, gpu=False, mounts=()):
        self.session, self.engine, self.image = session, engine, image
        self.gpu, self.mounts = gpu, list(mounts)

    def path(self, host_path: pathlib.Path) -> str:
        if self.engine is None:
            return str(host_path)
        return containers.to_image_path(host_path)

    def python(
        self, *args: str, env=None, stdout_to: pathlib.Path | None = None, success_codes=(0,)
    ) -> None:
        env = dict(env or {})
        if self.engine is None:
            argv, run_env = ["python", *args], env
        else:
            argv = containers.run_argv(
                self.engine, self.image, ["python", *args], env=env, gpu=self.gpu,
                mounts=self.mounts,
            )  # fmt: skip
            run_env = None
        kwargs = dict(env=run_env, external=True, success_codes=list(success_codes))
        if stdout_to is None:
            self.session.run(*argv, **kwargs)
            return
        # The tool's table goes to stdout, progress to stderr: keep the table, show both.
        with tempfile.TemporaryFile("w+") as captured:
            self.session.run(*argv, stdout=captured, stderr=sys.stderr, **kwargs)
            captured.seek(0)
            table = captured.read()
        atomic_files.atomic_write(stdout_to, table)
        print(table)


def step_benchmark(runner: Runner, run_dir: pathlib.Path, preset: str, args, env) -> None:
    """tools/benchmark_step.py for the preset, then its record validated."""
    if not (ROOT / "tools" / "benchmark_step.py").exists():
        runner.session.error("tools/benchmark_step.py is missing from this checkout")
    step_json = run_dir / "step.json"
    if runner.engine and not any(a.startswith("--compilation-cache-dir") for a in args):
        # The image's HOME is temporary: keep compiled executables in the mounted cache.
        args = ["--compilation-cache-dir", containers.IMAGE_XLA_CACHE, *args]
    runner.python(
        "tools/benchmark_step.py", "--preset", preset, "--json-out", runner.path(step_json),
        "--format", "md", *args, env=env, stdout_to=run_dir / "table.md",
    )  # fmt: skip
    runner.python("-m", "dew.bench.record.validate", runner.path(step_json))
    runner.session.log(f"record: {step_json.relative_to(ROOT)}")


@nox.session(name="base-image", python=False)
def base_image(session: nox.Session) -> None:
    """The offline base (Debian trixie, Python 3.13) from this machine's apt archive."""
    engine = choose_engine(session)
    if engine is None:
        session.error("base-image needs podman or docker: `apt-get install podman runc`")
    try:
        ref = containers.build_offline_base(engine, log=session.log)
        session.log(f"{ref} {containers.base_digest(engine, ref)}")
    except containers.EngineError as error:
        _fail(session, error)


@nox.session(name="cpu-smoke", python=PYTHON)
def cpu_smoke(session: nox.Session) -> None:
    """Tiny models of every architecture on 8 simulated CPU devices, in the cpu image, then
    the loader on a synthetic ArrayRecord set at their image size, with the keep-up verdict.

    `-- [--base-image REF] [benchmark_step.py flags]`; DEW_ENGINE=docker|podman|none.
    """
    args = list(session.posargs)
    requested_base = pop_option(args, "--base-image", os.environ.get("DEW_BASE_IMAGE"))
    engine = choose_engine(session)
    base = resolve_base(session, engine, requested_base) if engine else None
    if engine is None or base is None:
        why = (
            "DEW_ENGINE=none"
            if engine is None and os.environ.get("DEW_ENGINE")
            else ("no container engine answers" if engine is None else "no base image can be had")
        )
        session.log(f"{why}: running in a nox venv from locks/cpu.txt (container: null)")
        install_locked(session)
        runner = Runner(session)
    else:
        runner = Runner(session, engine, build_image(session, engine, "cpu", base))
    run_dir = new_run_dir("cpu-smoke", "cpu")
    smoke = ["--steps", "2", "--idle-check", "warn", *args]
    step_benchmark(runner, run_dir, "cpu-smoke", smoke, SMOKE_ENV)
    # Then the loader at the smoke models' image size, in process and with 2 workers,
    # against the rows just written, on a synthetic set in the real format (ArrayRecord
    # shards of JPEG Examples; the in-memory source would time a JPEG encode per record).
    data_dir = run_dir / "synthetic-data"
    runner.python("tools/prepare_dataset.py", "--synthetic", "512", "--out", runner.path(data_dir))
    synthetic = ["data:synthetic-images", "--data.path", runner.path(data_dir)]
    loader_benchmark(
        runner, run_dir, synthetic, image_size=SMOKE_IMAGE_SIZE, workers=(0, 2),
        against=run_dir / "step.json",
    )  # fmt: skip
    shutil.rmtree(data_dir)


@nox.session(name="multihost-smoke", python=PYTHON)
def multihost_smoke(session: nox.Session) -> None:
    """cpu-smoke as N processes on loopback (JAX's distributed runtime, gloo), record checked.

    `-- [--processes N] [benchmark_step.py flags]`; N (default 2) divides 8 simulated devices.
    """
    install_locked(session)
    args = list(session.posargs)
    processes = pop_option(args, "--processes", "2")
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
    from dew.bench import slurm

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
        _fail(session, error)
    output = run_dir / f"slurm-job-{job.id}.out"
    if output.exists():
        lines = output.read_text(errors="replace").splitlines(True)
        print("".join(line for line in lines[-40:] if "[Gloo]" not in line))
    if code != 0:
        session.error(f"SLURM job {job.id} exited {code}; its output: {output.relative_to(ROOT)}")
    record = slurm.record_path(run_dir, job.id)
    session.run("python", "-m", "dew.bench.record.validate", str(record))
    problem = slurm.check_record(record, processes=2, job_id=job.id)
    if problem:
        session.error(problem)
    wall = (datetime.datetime.now(datetime.UTC) - started).total_seconds()
    session.log(f"record: {record.relative_to(ROOT)} (2 processes, job {job.id}), {wall:.0f} s")


def gpu_preflight(session: nox.Session, variant: str):
    """Engine, GPU and driver, each failing with the one line that says what to fix."""
    if variant not in MIN_DRIVER:
        session.error(f"--variant {variant!r} is not one of: {', '.join(MIN_DRIVER)}")
    engine = choose_engine(session)
    if engine is None:
        session.error(
            "bench-gpu needs a container engine with GPU access: install docker with the "
            "NVIDIA Container Toolkit, or podman with its CDI spec (nvidia-ctk cdi generate)"
        )
    if not shutil.which("nvidia-smi"):
        session.error(
            "no NVIDIA GPU here: nvidia-smi is not on PATH; bench-gpu needs an NVIDIA GPU and "
            f"driver >= {MIN_DRIVER[variant]} (on a CPU machine run `nox -s cpu-smoke`)"
        )
    query = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    lines = [line.split(",") for line in query.stdout.strip().splitlines() if "," in line]
    if query.returncode != 0 or not lines:
        session.error(f"nvidia-smi sees no GPU: {query.stderr.strip() or query.stdout.strip()}")
    name, driver = lines[0][0].strip(), lines[0][1].strip()
    if int(driver.split(".")[0]) < MIN_DRIVER[variant]:
        session.error(
            f"driver {driver} is older than {variant} needs ({MIN_DRIVER[variant]}+): "
            "update the NVIDIA driver or use --variant cuda12"
        )
    return engine, name


@nox.session(name="bench-gpu", python=False)
def bench_gpu(session: nox.Session) -> None:
    """The small preset on the GPU, one process per architecture, in the CUDA image.

    `-- [--variant cuda13|cuda12] [--base-image REF] [--data.path DIR] [benchmark_step flags]`
    """
    args = list(session.posargs)
    variant = pop_option(args, "--variant", "cuda13")
    requested_base = pop_option(args, "--base-image", os.environ.get("DEW_BASE_IMAGE"))
    data_path = pop_option(args, "--data.path")
    if data_path and not pathlib.Path(data_path).is_dir():
        session.error(f"--data.path {data_path} is not a directory")
    engine, gpu_name = gpu_preflight(session, variant)
    base = resolve_base(session, engine, requested_base)
    if base is None:
        session.error(f"no base image: pull {containers.DEFAULT_BASE_IMAGE} or install debootstrap")
    image = build_image(session, engine, variant, base)
    mounts = [(pathlib.Path(data_path), "/data", "ro")] if data_path else []
    runner = Runner(session, engine, image, gpu=True, mounts=mounts)
    gpu_visible_in_image(session, engine, image)
    run_dir = new_run_dir("small", gpu_name)
    # Three repeats: a fresh compile each (XLA may choose differently between compiles),
    # the fewest that let compare give a verdict (dew.bench.analysis.stats.MIN_REPEATS).
    repeats = [] if any(a.startswith("--repeats") for a in args) else ["--repeats", "3"]
    step_benchmark(
        runner, run_dir, "small",
        ["--idle-check", "error", "--gpu-check", "error", *repeats, *args],
        {"JAX_PLATFORMS": "cuda"},
    )  # fmt: skip
    if data_path:
        flowers = ["data:oxford-flowers", "--data.path", "/data"]
        loader_benchmark(runner, run_dir, flowers, against=run_dir / "step.json")
    compare_with_published(runner, run_dir)


def gpu_visible_in_image(session: nox.Session, engine, image) -> None:
    """The GPU through the engine: the NVIDIA Container Toolkit (docker) or CDI spec (podman)."""
    probe = "import jax; print(len(jax.devices('gpu')))"
    argv = containers.run_argv(
        engine, image, ["python", "-c", probe], env={"JAX_PLATFORMS": "cuda"}, gpu=True
    )
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        fix = (
            "install the NVIDIA Container Toolkit"
            if engine.name == "docker"
            else "generate the CDI spec: nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"
        )
        session.error(f"the GPU is not visible inside {engine.name} ({last}): {fix}")


def compare_with_published(runner: Runner, run_dir: pathlib.Path, reference=None) -> None:
    """The run against the matching published record (or `reference`): table and chart.
    Rows outside the noise band are a finding, not a failure of the session."""
    step_json = run_dir / "step.json"
    refs = [runner.path(reference)] if reference else []
    runner.python(
        "-m", "dew.bench.analysis.compare", runner.path(step_json), *refs,
        "--plot", runner.path(run_dir / "compare.png"),
        stdout_to=run_dir / "compare.md", success_codes=(0, 1),
    )  # fmt: skip


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


@nox.session(name="bench-data", python=PYTHON)
def bench_data(session: nox.Session) -> None:
    """The loader benchmark: `-- --data.path DIR [benchmark_data.py flags]`.

    In the cpu image when an engine answers, else in a nox venv from locks/cpu.txt.
    """
    args = list(session.posargs)
    data_path = pop_option(args, "--data.path")
    if not data_path or not pathlib.Path(data_path).is_dir():
        session.error(
            f"--data.path {data_path or '(missing)'} is not a directory: give a prepared "
            "oxford_flowers102 version directory (tools/prepare_dataset.py --source DIR "
            "--out DIR; a --synthetic set runs as data:synthetic-images)"
        )
    engine = choose_engine(session)
    base = resolve_base(session, engine, os.environ.get("DEW_BASE_IMAGE")) if engine else None
    if engine is None or base is None:
        session.log("no container engine or base: running in a nox venv from locks/cpu.txt")
        install_locked(session)
        runner, inside = Runner(session), str(pathlib.Path(data_path).resolve())
    else:
        mounts = [(pathlib.Path(data_path), "/data", "ro")]
        image = build_image(session, engine, "cpu", base)
        runner, inside = Runner(session, engine, image, mounts=mounts), "/data"
    flowers = ["data:oxford-flowers", "--data.path", inside]
    loader_benchmark(runner, new_run_dir("data", "cpu"), flowers, args=args)


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
    """Rerun a step record on its own stack, then compare: `-- RECORD.json`.

    The record's stack is materialised as an image (docker/stacks.py: a git worktree at its
    commit, its lock, its Dockerfile, its base) and that commit's own tool runs in it with
    the record's cases and settings; today's compare then holds the new record against the
    old one (the statistics verdicts). A record whose stack cannot be built (no commit, the
    published ones; a dirty tree; a commit this clone lacks or from before the containers)
    says which parts it matches and which not, then one line, exit 2.
    """
    stacks = _stacks()
    if len(session.posargs) != 1:
        _usage("reproduce", f"takes one step record (a JSON file), got {len(session.posargs)}")
    record_path = pathlib.Path(session.posargs[0])
    try:
        record = json.loads(record_path.read_text())
        settings, environment = record["settings"], record["environment"]
    except (OSError, UnicodeDecodeError) as error:
        _usage("reproduce", f"{record_path}: cannot read it ({error})")
    except (ValueError, KeyError, TypeError) as error:
        _usage("reproduce", f"{record_path} is not a results record ({error!r})")
    if record.get("kind") != "step":
        _usage("reproduce", f"{record_path} is a {record.get('kind')!r} record; it takes 'step'")
    matched, unmatched = stacks.stack_parts(record)
    try:
        spec = stacks.spec_from_record(record, f"record {record_path.name}")
    except containers.EngineError as error:
        for line in matched:
            session.log(f"matches: {line}")
        for line in unmatched:
            session.log(f"cannot match: {line}")
        _usage("reproduce", str(error))
    engine = _engine_for(session, "reproduce", spec.variant)
    image, base_lines = _materialise(session, "reproduce", engine, [spec])[0]
    unmatched = base_lines + stack_differences(environment, image)
    for line in unmatched:
        session.log(f"not matched: {line}")
    on_gpu = spec.variant != "cpu"
    if on_gpu:
        gpu_visible_in_image(session, engine, image)
    runner = Runner(session, engine, image, gpu=on_gpu)
    run_dir = new_run_dir(f"reproduce-{settings.get('preset') or 'cases'}", spec.variant)
    if unmatched:
        atomic_files.atomic_write(run_dir / "not-matched.txt", "\n".join(unmatched) + "\n")
    step_json = run_dir / "step.json"
    args = stacks.settings_args(settings) + ["--format", "md", "--idle-check"]
    args += ["error" if on_gpu else "warn"]
    session.log(f"{spec.commit[:7]}'s own tool in {image.ref}: {' '.join(args)}")
    runner.python(
        "tools/benchmark_step.py", *args, "--json-out", runner.path(step_json),
        env=dict(environment.get("env_flags") or {}), stdout_to=run_dir / "table.md",
        success_codes=(0, 1),
    )  # fmt: skip
    reference = run_dir / "reference.json"  # inside results/, so the container sees it
    shutil.copyfile(record_path, reference)
    today = _today_runner(session, engine)  # today's validate and compare judge the rerun
    today.python("-m", "dew.bench.record.validate", today.path(step_json))
    compare_with_published(today, run_dir, reference=reference)
    session.log(f"record: {step_json.relative_to(ROOT)} (commit {spec.commit[:7]}, {image.ref})")


@nox.session(python=PYTHON)
def ab(session: nox.Session) -> None:
    """Two stacks timed side by side on this host in paired, interleaved rounds.

    `-- A B [--rounds R] [--preset P] (--architectures NAME... | --cases JSON) [--steps N]
    [--warmup N] [--variant cpu|cuda12|cuda13] [--a-env K=V] [--b-env K=V]
    [--a-xla-flags FLAGS] [--b-xla-flags FLAGS] [--band PCT] [--alpha A]`: A and B are each
    a commit, a record (its stack) or an image. Every round runs every case once per side,
    each in a fresh process, alternating which side goes first; then one record per side
    and the A/B table of the paired per-round ratios (dew.bench.analysis.ab), markdown and chart.
    """
    stacks = _stacks()
    try:
        args = stacks.parse_ab(session.posargs)
    except containers.EngineError as error:
        _usage("ab", str(error))
    engine = _engine_for(session, "ab", args.variant)
    try:
        sides = {
            name: stacks.resolve_side(engine, name, given, args.variant)
            for name, given in (("A", args.a), ("B", args.b))
        }
    except containers.EngineError as error:
        _usage("ab", str(error))
    to_build = [side for side in sides.values() if side.image is None]
    made = _materialise(session, "ab", engine, [side.spec for side in to_build])
    for side, (image, lines) in zip(to_build, made, strict=True):
        side.image = image
        for line in lines:
            session.log(f"{side.name} not matched: {line}")
    for side in sides.values():
        if side.image.variant != args.variant:
            why = f"a {side.image.variant} image, not {args.variant} (--variant)"
            _usage("ab", f"{side.name} {side.given} is {why}")
    run_dir = new_run_dir(f"ab-{args.preset}", args.variant)
    env = SMOKE_ENV if args.variant == "cpu" else {"JAX_PLATFORMS": "cuda"}
    stacks.run_rounds(engine, sides, args, run_dir, env, log=session.log)
    today = _today_runner(session, engine)
    today.python("-m", "dew.bench.analysis.ab", today.path(run_dir), success_codes=(0, 1))
    session.log(f"A/B: {(run_dir / 'ab.md').relative_to(ROOT)}, a.json, b.json, ab.png")


def _stacks():
    """docker/stacks.py, loaded once like docker/engine.py (whose module it shares)."""
    if "dew_stacks" not in sys.modules:
        spec = importlib.util.spec_from_file_location("dew_stacks", ROOT / "docker" / "stacks.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return sys.modules["dew_stacks"]


def _usage(prog: str, message: str):
    """Bad input, or a stack that cannot be built: one line, exit 2 (nox's own is 1)."""
    from dew.bench.common import cli

    cli.say(prog, message)
    raise SystemExit(cli.EXIT_USAGE)


def _engine_for(session: nox.Session, prog: str, variant: str):
    if variant != "cpu":
        return gpu_preflight(session, variant)[0]
    engine = choose_engine(session)
    if engine is None:
        _usage(prog, "building a stack needs podman or docker (`apt-get install podman runc`)")
    return engine


def _materialise(session: nox.Session, prog: str, engine, specs) -> list[tuple[object, list]]:
    """Each spec's image and what of its recorded base it does not match; on any failure the
    images built here are removed (worktrees are gone already), then one line, exit 2."""
    stacks, built, made = _stacks(), [], []

    def default_base():
        base = resolve_base(session, engine, os.environ.get("DEW_BASE_IMAGE"))
        if base is None:
            raise containers.EngineError(f"no base image: pull {containers.DEFAULT_BASE_IMAGE} "
                                         "or install debootstrap (nox -s base-image)")  # fmt: skip
        return base

    try:
        for spec in specs:
            base, lines = stacks.choose_base(engine, spec, default_base, log=session.log)
            made.append((stacks.materialise(engine, spec, base, built, log=session.log), lines))
    except (containers.EngineError, OSError) as error:
        stacks.remove_built(engine, built)
        _usage(prog, str(error))
    return made


def _today_runner(session: nox.Session, engine) -> Runner:
    """The checkout's own tools (validate, compare, the A/B table): its cpu image."""
    base = resolve_base(session, engine, os.environ.get("DEW_BASE_IMAGE"))
    if base is None:
        install_locked(session)
        return Runner(session)
    return Runner(session, engine, build_image(session, engine, "cpu", base))


def stack_differences(environment: dict, image) -> list[str]:
    """What of the record's stack the materialised image (or this host) does not match."""
    lines = []
    container = environment.get("container") or {}
    if not container:
        lines.append("the record ran outside any image: the lock and Dockerfile are its commit's")
    here = {
        "lock_sha256": image.lock_sha256, "dockerfile_sha256": image.dockerfile_sha256,
        "variant": image.variant, "base_image_digest": image.base_digest,
    }  # fmt: skip
    for name, value in here.items():
        recorded = container.get(name)
        if recorded and value and recorded != value:
            lines.append(f"{name}: the record's {recorded[:24]}, the image's {value[:24]}")
    devices = environment.get("devices") or {}
    if devices.get("platform") == "gpu":
        query = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, check=False,
        ) if shutil.which("nvidia-smi") else None  # fmt: skip
        here_gpu = query.stdout.strip().splitlines()[0] if query and query.stdout.strip() else ""
        name, _, driver = (part.strip() for part in here_gpu.partition(","))
        if devices.get("kind") and devices["kind"].lower() not in name.lower():
            lines.append(f"GPU: the record ran on {devices['kind']}, here {name or 'none'}")
        if environment.get("driver_version") and environment["driver_version"] != driver:
            lines.append(
                f"driver: the record's {environment['driver_version']}, here {driver or 'none'}"
            )
    return lines
