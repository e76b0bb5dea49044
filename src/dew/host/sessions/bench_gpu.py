"""`nox -s bench-gpu`, in order: the host's checks (engine, GPU, driver, the engine's NVIDIA
support; before anything is built), the base and the CUDA image, the GPU seen through the
engine, the small preset's step benchmark (its idle check and --gpu-check gate, repeats
each a fresh compile, GPU_ENV), the loader when a dataset is given, and the comparison with
the published record.

`session` is a nox.Session; nothing here imports nox (the noxfile passes its session in).
"""

from __future__ import annotations

from pathlib import Path

from dew.host.bases import DEFAULT_BASE_IMAGE
from dew.host.benchmarks import (
    base_image_flag,
    build_image,
    compare_with_published,
    data_path_flag,
    last_option,
    loader_benchmark,
    resolve_base,
    session_flags,
    step_benchmark,
)
from dew.host.gpu_checks import GPU_ENV, gpu_preflight, gpu_visible_in_image, refuse
from dew.host.runner import Runner, new_run_dir
from dew.host.venvs import today_runner

DEFAULT_VARIANT = "cuda13"
# Three repeats, the fewest that let compare give a verdict (dew.bench.analysis.stats
# .MIN_REPEATS); each a fresh compile (benchmarks.compilation_cache_args).
DEFAULT_REPEATS = "3"
# The gates a GPU measurement passes before its numbers count; the user's flags, after
# these, win (the tool's parser keeps the last).
GATES = ["--idle-check", "error", "--gpu-check", "error"]


def step_args(args: list[str], gates: list[str] = GATES) -> list[str]:
    """The step benchmark's flags: the gates, the repeats unless given, the user's flags."""
    repeats = [] if last_option(args, "--repeats") else ["--repeats", DEFAULT_REPEATS]
    return [*gates, *repeats, *args]


def bench_gpu(session) -> None:
    """The session: `-- [--variant cuda13|cuda12] [--base-image REF] [--data.path DIR]
    [benchmark_step flags]`. The comparison runs in the session's venv (locks/dev.txt,
    `today_runner`): the measured images hold no report libraries."""
    own, args = session_flags("bench-gpu", session.posargs, own_flags)
    variant, requested_base, data_path = own.variant, own.base_image, own.data_path
    if data_path and not Path(data_path).is_dir():
        refuse(session, f"--data.path {data_path} is not a directory")
    engine, gpu_name = gpu_preflight(session, variant)
    base = resolve_base(session, engine, requested_base)
    if base is None:
        refuse(session, f"no base image: pull {DEFAULT_BASE_IMAGE} or install debootstrap")
    image = build_image(session, engine, variant, base)
    mounts = [(Path(data_path), "/data", "ro")] if data_path else []
    runner = Runner(session, engine, image, gpu=True, mounts=mounts)
    gpu_visible_in_image(session, engine, image)
    run_dir = new_run_dir("small", gpu_name)
    step_benchmark(runner, run_dir, "small", step_args(args), GPU_ENV)
    if data_path:
        flowers = ["data:oxford-flowers", "--data.path", "/data"]
        loader_benchmark(runner, run_dir, flowers, against=run_dir / "step.json")
    compare_with_published(today_runner(session), run_dir)


def own_flags(parser) -> None:
    """bench-gpu's flags; every other goes to the step benchmark."""
    parser.add_argument(
        "--variant", default=DEFAULT_VARIANT, help="the CUDA image: cuda13 (default) or cuda12"
    )
    base_image_flag(parser)
    data_path_flag(parser)
