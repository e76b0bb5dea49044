"""dew's front door. Needs nothing but nox and the standard library: it runs before any
environment exists, and builds every environment it uses from the hash locks. It only
declares the sessions; their bodies are the standard-library package dew.host (one module
per session under dew.host.sessions), imported from src/."""

from __future__ import annotations

import pathlib
import sys

import nox

ROOT = pathlib.Path(__file__).parent
SLOWEST = 20  # the tests a run prints as its slowest: where the suite's time goes
# A worker process per core (at most 4, tests/conftest.py), each given whole files: a file's
# module fixtures are built once. `-- -n 0` runs the suite in one process.
WORKERS = ["-n", "auto", "--dist", "loadfile"]

# dew.host and the standard-library modules of dew it uses, from this checkout's src/
# (no environment exists yet, and an installed dew may be another commit's).
sys.path.insert(0, str(ROOT / "src"))
from dew.bench.multihost import kubernetes  # noqa: E402  (standard library only)
from dew.host import sessions  # noqa: E402
from dew.host.venvs import PYTHON, install_locked  # noqa: E402

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests"]


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The test suite on CPU (8 simulated devices), in a venv built from locks/dev.txt,
    without the slow tier (tests/conftest.py says which tests are in it), in a worker per
    core; every run ends with its slowest tests."""
    install_locked(session)
    session.run("pytest", *WORKERS, "-m", "not slow", f"--durations={SLOWEST}", *session.posargs)


@nox.session(name="tests-full", python=PYTHON)
def tests_full(session: nox.Session) -> None:
    """Every test, the slow tier included (`-- -m slow`: that tier alone, as CI runs it)."""
    install_locked(session)
    session.run("pytest", *WORKERS, f"--durations={SLOWEST}", *session.posargs)


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
    sessions.lock.lock(session)


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


# --- containers and benchmark sessions: the bodies are dew.host.sessions ----------------


@nox.session(name="base-image", python=False)
def base_image(session: nox.Session) -> None:
    """The offline base (Debian trixie, Python 3.13) from this machine's apt archive."""
    sessions.base_image.base_image(session)


@nox.session(name="cpu-smoke", python=PYTHON)
def cpu_smoke(session: nox.Session) -> None:
    """Tiny models of every architecture on 8 simulated CPU devices, in the cpu image, then
    the loader on a synthetic ArrayRecord set at their image size, with the keep-up verdict.

    `-- [--base-image REF] [benchmark_step.py flags]`; DEW_ENGINE=docker|podman|none.
    """
    sessions.smoke.cpu_smoke(session)


@nox.session(name="cuda-smoke", python=False)
def cuda_smoke(session: nox.Session) -> None:
    """The CUDA image proven without a GPU: built from its lock (on the offline base where
    no registry answers), then cpu-smoke inside it with JAX_PLATFORMS=cpu on three
    architectures, the loader and validate; the record must name the image and its CUDA wheels.

    `-- [cuda12|cuda13] [--base-image REF] [benchmark_step.py flags]` (default cuda13).
    """
    sessions.smoke.cuda_smoke(session)


@nox.session(name="multihost-smoke", python=PYTHON)
def multihost_smoke(session: nox.Session) -> None:
    """cpu-smoke as N processes on loopback (JAX's distributed runtime, gloo), record checked.

    `-- [--processes N] [benchmark_step.py flags]`; N (default 2) divides 8 simulated devices.
    """
    sessions.multihost_smoke.multihost_smoke(session)


@nox.session(name="slurm-smoke", python=PYTHON)
def slurm_smoke(session: nox.Session) -> None:
    """cpu-smoke submitted to SLURM as 2 tasks x 4 simulated CPU devices (JAX's SLURM
    detection forms the mesh), the job waited for and its record checked.

    The host's SLURM when `sinfo` answers; else a throwaway one-node cluster (slurm-wlm and
    munge installed when missing, as root), stopped and removed afterwards whatever happens.
    `-- [benchmark_step.py flags]` (default `--architectures simple_dit`, 2 steps).
    """
    sessions.slurm_smoke.slurm_smoke(session)


@nox.session(name="k8s-manifests", python=False)
def k8s_manifests(session: nox.Session) -> None:
    """A multi-host run as Kubernetes manifests, no venv: dew.bench.multihost.kubernetes."""
    kubernetes.main(session.posargs, exit_on_error=True)  # bad input: one line, exit 2


@nox.session(name="bench-gpu", python=PYTHON)
def bench_gpu(session: nox.Session) -> None:
    """The small preset on the GPU, one process per architecture, in the CUDA image.

    The host's checks (the NVIDIA toolkit or CDI spec too) before the build, the GPU seen in
    the image, the step benchmark (3 repeats, each a fresh compile), the loader, compare.

    `-- [--variant cuda13|cuda12] [--base-image REF] [--data.path DIR] [benchmark_step flags]`
    The comparison with the published record runs in the session's venv (locks/dev.txt).
    """
    sessions.bench_gpu.bench_gpu(session)


@nox.session(name="bench-data", python=PYTHON)
def bench_data(session: nox.Session) -> None:
    """The loader benchmark: `-- --data.path DIR [benchmark_data.py flags]`.

    In the cpu image when an engine answers, else in a nox venv from locks/dev.txt.
    """
    sessions.bench_data.bench_data(session)


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
    [--interleaved N]`. What it runs and what each argument means: `dew reproduce --help`
    (dew.host.sessions.reproduce_session).
    """
    sessions.reproduce_session.reproduce(session)


@nox.session(python=PYTHON)
def ab(session: nox.Session) -> None:
    """Two stacks timed side by side on this host in paired, interleaved rounds.

    `-- A B [--rounds R] [--preset P] (--architectures NAME... | --cases JSON) ...`: every
    argument, and what the rounds are: `dew ab --help` (dew.host.sessions.ab_session).
    """
    sessions.ab_session.ab(session, session.posargs)


# --- a host's own JAX: the offline bundle, its CI twin, and the TPU stack -----------------


@nox.session(python=PYTHON)
def bundle(session: nox.Session) -> None:
    """Wheels for a host with no network, installed beside its own JAX by the bundle's
    install.py: `-- --out DIR [--python 3.11]` (locks/tpu-host.txt, dew's wheel, install.py)."""
    sessions.bundle.bundle(session)


@nox.session(name="tpu-host-smoke", python=PYTHON)
def tpu_host_smoke(session: nox.Session) -> None:
    """The TPU host reproduced on CPU: Python 3.11, jax/jaxlib 0.10.2 in a folder on
    PYTHONPATH (locks/tpu-host-jax.txt), the bundle built and installed by its install.py,
    cpu-smoke on simple_dit and unet, its record checked. `-- [benchmark_step.py flags]`.
    """
    sessions.tpu_host_smoke.tpu_host_smoke(session)


@nox.session(name="bench-tpu", python=PYTHON)
def bench_tpu(session: nox.Session) -> None:
    """The small preset on a TPU, on locks/tpu.txt's stack: in the tpu image where an engine
    answers (privileged, the host's network), else in this venv from the lock, said in one
    line; refused in one line where no TPU is found. The rest as bench-gpu.

    `-- [--base-image REF] [--data.path DIR] [benchmark_step flags]`
    """
    sessions.bench_tpu.bench_tpu(session)
