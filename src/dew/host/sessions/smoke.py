"""`nox -s cpu-smoke` and `nox -s cuda-smoke`, and the body they share: the step benchmark on 8
simulated CPU devices, the loader on a synthetic ArrayRecord set at the smoke models' image
size, each record validated; and what cuda-smoke adds: its variant, its three cases, and
the check that its record names the CUDA image and the CUDA wheels installed in it.

`session` is a nox.Session; nothing here imports nox.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from dew.bench.record import stack  # standard library only
from dew.host.benchmarks import (
    SMOKE_ENV,
    SMOKE_IMAGE_SIZE,
    base_image_flag,
    build_image,
    choose_engine,
    loader_benchmark,
    resolve_base,
    session_flags,
    step_benchmark,
    usage,
)
from dew.host.engine import ROOT
from dew.host.runner import Runner, new_run_dir
from dew.host.venvs import install_locked

CUDA_VARIANTS = ("cuda12", "cuda13")
DEFAULT_CUDA_VARIANT = "cuda13"
# One architecture of each family (a diffusion transformer, a convolutional U-Net, a
# decoder LM), one case each: the CUDA image's stack through three different programs.
CUDA_SMOKE_CASES = (
    '[{"architecture": "simple_dit"}, {"architecture": "unet"}, '
    '{"architecture": "causal_transformer"}]'
)


def engine_and_base(session, requested: str | None):
    """The engine and the base to build on (`requested`: --base-image or DEW_BASE_IMAGE;
    else resolve_base's choice); None for either that cannot be had."""
    engine = choose_engine(session)
    return engine, resolve_base(session, engine, requested) if engine else None


def cuda_image(session, variant: str, requested_base: str | None):
    """The engine and the CUDA image of `variant`, built when missing; without an engine or
    a base, the session's one error line."""
    engine, base = engine_and_base(session, requested_base)
    if base is None:
        session.error("cuda-smoke needs podman or docker and a base image (nox -s base-image)")
    return engine, build_image(session, engine, variant, base)


def no_image_reason(engine) -> str:
    """Why cpu-smoke runs in a venv instead of the cpu image."""
    if engine is None:
        return "DEW_ENGINE=none" if os.environ.get("DEW_ENGINE") else "no container engine answers"
    return "no base image can be had"


def smoke(runner: Runner, run_dir: Path, preset_args: list[str]) -> None:
    """The cpu-smoke step benchmark (2 steps, the idle check a warning) with `preset_args`,
    then the loader at the smoke models' image size, in process and with 2 workers,
    against the rows just written, on a synthetic set in the real format (ArrayRecord
    shards of JPEG Examples; the in-memory source would time a JPEG encode per record)."""
    args = ["--steps", "2", "--idle-check", "warn", *preset_args]
    step_benchmark(runner, run_dir, "cpu-smoke", args, SMOKE_ENV)
    data_dir = run_dir / "synthetic-data"
    runner.python("tools/prepare_dataset.py", "--synthetic", "512", "--out", runner.path(data_dir))
    synthetic = ["data:synthetic-images", "--data.path", runner.path(data_dir)]
    loader_benchmark(
        runner, run_dir, synthetic, image_size=SMOKE_IMAGE_SIZE, workers=(0, 2),
        against=run_dir / "step.json",
    )  # fmt: skip
    shutil.rmtree(data_dir)


def cuda_arguments(posargs: list[str]) -> tuple[str, list[str]]:
    """cuda-smoke's `[cuda12|cuda13] [benchmark_step.py flags]`: the variant (default
    cuda13) and the flags, with the three cases unless the flags choose others; anything
    else one line, exit 2."""
    args = list(posargs)
    variant = DEFAULT_CUDA_VARIANT
    if args and not args[0].startswith("-"):
        variant = args.pop(0)
    if variant not in CUDA_VARIANTS:
        usage("cuda-smoke", f"unknown variant {variant!r}; valid: {', '.join(CUDA_VARIANTS)}")
    if not any(arg.startswith(("--cases", "--architectures")) for arg in args):
        args = ["--cases", CUDA_SMOKE_CASES, *args]
    return variant, args


def cuda_packages(packages: dict) -> dict[str, str]:
    """The CUDA plugin and CUDA library wheels among a record's packages."""
    cuda = {k: v for k, v in packages.items() if k.startswith(stack.CUDA_PREFIXES) and v}
    return {name: cuda[name] for name in sorted(cuda) if name != "nvidia-ml-py"}


def check_cuda_record(record: dict, image) -> list[str]:
    """What the cuda-smoke record lacks, one line each: every row ok, the CUDA image named
    (tag, id, variant), its CUDA plugin and at least one CUDA library in its packages."""
    problems = [
        f"row {row.get('architecture')}: {row.get('status')}"
        for row in record.get("rows", [])
        if row.get("status") != "ok"
    ]
    environment = record.get("environment") or {}
    container = environment.get("container") or {}
    for field, want in (("tag", image.ref), ("image_id", image.id), ("variant", image.variant)):
        if container.get(field) != want:
            problems.append(
                f"environment.container.{field} is {container.get(field)!r}, not {want}"
            )
    cuda = cuda_packages(environment.get("packages") or {})
    for name in (f"jax-{image.variant}-plugin", f"jax-{image.variant}-pjrt"):
        if name not in cuda:
            problems.append(f"packages lack {name}")
    if not any(name.startswith("nvidia-") for name in cuda):
        problems.append("packages list no nvidia-* CUDA library")
    return problems


def verify_cuda_record(session, step_json: Path, image) -> None:
    """The record's CUDA wheels said in one line, then check_cuda_record's problems as the
    session's one error line."""
    record = json.loads(step_json.read_text())
    cuda = cuda_packages((record.get("environment") or {}).get("packages") or {})
    session.log("CUDA wheels in the record: " + ", ".join(f"{k} {v}" for k, v in cuda.items()))
    problems = check_cuda_record(record, image)
    if problems:
        session.error(f"{step_json.relative_to(ROOT)}: " + "; ".join(problems))
    session.log(f"record: {step_json.relative_to(ROOT)} names {image.ref} ({image.id[:19]})")


def cpu_smoke(session) -> None:
    """The session: `-- [--base-image REF] [benchmark_step.py flags]`; in the cpu image, or
    in the session's venv from locks/dev.txt when no engine or base can be had."""
    own, args = session_flags("cpu-smoke", session.posargs, base_image_flag)
    engine, base = engine_and_base(session, own.base_image)
    if engine is None or base is None:
        why = no_image_reason(engine)
        session.log(f"{why}: running in a nox venv from locks/dev.txt (container: null)")
        install_locked(session)
        runner = Runner(session)
    else:
        runner = Runner(session, engine, build_image(session, engine, "cpu", base))
    smoke(runner, new_run_dir("cpu-smoke", "cpu"), args)


def cuda_smoke(session) -> None:
    """The session: `-- [cuda12|cuda13] [--base-image REF] [benchmark_step.py flags]`."""
    variant, args = cuda_arguments(session.posargs)
    own, args = session_flags("cuda-smoke", args, base_image_flag)
    engine, image = cuda_image(session, variant, own.base_image)
    run_dir = new_run_dir("cuda-smoke", variant)
    smoke(Runner(session, engine, image), run_dir, args)
    verify_cuda_record(session, run_dir / "step.json", image)
