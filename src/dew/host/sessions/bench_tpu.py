"""`nox -s bench-tpu`, what bench-gpu runs, on a TPU and on locks/tpu.txt's stack (jax[tpu]
0.11.1, libtpu 0.0.46.3), in order: the host's TPU found (else one line, exit 2, before
anything is built), where the run happens said in one line (the tpu image when an engine
answers and a base can be had, else the session's venv from the lock), the small preset's
step benchmark (its idle check an error, 3 repeats each a fresh compile), the loader when
a dataset is given, and the comparison with the published record.

A TPU host as found (its own JAX on Python 3.11, no network, no container engine) cannot
build either: there dew runs from the bundle (nox -s bundle, docs/tpu-install.md).

`session` is a nox.Session; nothing here imports nox.
"""

from __future__ import annotations

from pathlib import Path

from dew.host.benchmarks import (
    base_image_flag,
    build_image,
    compare_with_published,
    data_path_flag,
    loader_benchmark,
    session_flags,
    step_benchmark,
    usage,
)
from dew.host.runner import Runner, new_run_dir
from dew.host.sessions.bench_gpu import step_args
from dew.host.sessions.smoke import engine_and_base, no_image_reason
from dew.host.venvs import install_locked, today_runner

LOCK = "tpu"
GOOGLE_PCI_VENDOR = "0x1ae0"  # the vendor id of a TPU chip's PCI function
# The gate a TPU measurement passes (bench-gpu's --gpu-check is NVML's); the user's flags win.
GATES = ["--idle-check", "error"]


def tpu_chips(root: Path = Path("/")) -> list[str]:
    """What shows this host a TPU: the chips' device nodes (/dev/accel* on v2-v4,
    /dev/vfio/N on v5e and later) and Google's PCI functions; [] on a host without one."""
    nodes = sorted(str(path) for path in (root / "dev").glob("accel[0-9]*"))
    nodes += sorted(str(path) for path in (root / "dev" / "vfio").glob("[0-9]*"))
    for device in sorted((root / "sys" / "bus" / "pci" / "devices").glob("*")):
        try:
            if (device / "vendor").read_text().strip() == GOOGLE_PCI_VENDOR:
                nodes.append(f"PCI {device.name}")
        except OSError:
            continue
    return nodes


def where(session, requested_base: str | None, data: list) -> tuple[Runner, str]:
    """The runner on locks/tpu.txt's stack and the line that says where it runs."""
    engine, base = engine_and_base(session, requested_base)
    if base is not None:
        image = build_image(session, engine, LOCK, base)
        line = f"in the tpu image {image.ref} ({engine.name}; privileged, the host's network)"
        return Runner(session, engine, image, tpu=True, mounts=data), line
    install_locked(session, LOCK)
    return Runner(
        session
    ), f"in this session's venv from locks/{LOCK}.txt ({no_image_reason(engine)})"


def bench_tpu(session) -> None:
    """The session: `-- [--base-image REF] [--data.path DIR] [benchmark_step flags]`."""
    own, args = session_flags("bench-tpu", session.posargs, own_flags)
    if own.data_path and not Path(own.data_path).is_dir():
        usage("bench-tpu", f"--data.path {own.data_path} is not a directory")
    chips = tpu_chips()
    if not chips:
        usage("bench-tpu", "no TPU on this host (no /dev/accel*, no /dev/vfio/N, no Google "
              "PCI device): run it on a TPU VM, or `nox -s cpu-smoke` here")  # fmt: skip
    data = [(Path(own.data_path), "/data", "ro")] if own.data_path else []
    runner, line = where(session, own.base_image, data)
    session.log(f"bench-tpu: {len(chips)} TPU device(s) ({', '.join(chips[:4])}); {line}")
    run_dir = new_run_dir("small", "tpu")
    step_benchmark(runner, run_dir, "small", step_args(args, GATES), {})
    if own.data_path:
        inside = "/data" if runner.engine else str(Path(own.data_path).resolve())
        flowers = ["data:oxford-flowers", "--data.path", inside]
        loader_benchmark(runner, run_dir, flowers, against=run_dir / "step.json")
    compare_with_published(today_runner(session), run_dir)


def own_flags(parser) -> None:
    """bench-tpu's flags; every other goes to the step benchmark."""
    base_image_flag(parser)
    data_path_flag(parser)
