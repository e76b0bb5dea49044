"""`nox -s tpu-host-smoke`: the TPU host as found, reproduced on CPU, and dew installed on it
the host's way. The host's Python (python3.11), its own packages (locks/tpu-host-jax.txt:
jax and the CPU jaxlib 0.10.2, numpy, scipy; no libtpu) installed into a folder on
PYTHONPATH, the bundle built (nox -s bundle) and installed there by its install.py, then
the cpu-smoke step benchmark on two architectures with the bundle's env.sh sourced, its
record validated by that Python and checked: Python 3.11, the host's jax from the host's
folder, flax 0.12.8 from the bundle, every row ok.

`session` is a nox.Session; nothing here imports nox.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from dew.host import tpu_host
from dew.host.benchmarks import SMOKE_ENV, session_flags, step_benchmark, usage
from dew.host.engine import EngineError
from dew.host.runner import Runner, new_run_dir
from dew.host.sessions import bundle
from dew.host.wheelhouse import wheelhouse

# One diffusion transformer and the convolutional U-Net: two different programs through
# the host's jax 0.10.2 and the bundle's flax 0.12.8.
DEFAULT_ARCHITECTURES = ["--architectures", "simple_dit", "unet"]
# No pip config of this machine's (an index, constraints) takes part in an offline install.
OFFLINE_PIP = {"PIP_CONFIG_FILE": os.devnull}


def host_python(session) -> str:
    """The interpreter python3.11 stands for (a pyenv shim's target), or one line, exit 2."""
    name = f"python{tpu_host.HOST_PYTHON}"
    if shutil.which(name) is None:
        usage("tpu-host-smoke", f"no {name} on PATH: the twin runs on the host's Python "
              f"(e.g. `pyenv install {tpu_host.HOST_PYTHON}`)")  # fmt: skip
    asked = subprocess.run([name, "-c", "import sys; print(sys.executable)"],
                           capture_output=True, text=True)  # fmt: skip
    if asked.returncode != 0:
        usage("tpu-host-smoke", f"{name} does not start: {asked.stderr.strip()[-200:]}")
    return asked.stdout.strip()


def check_record(record: dict, host: Path, site: Path) -> list[str]:
    """What the twin's record must show, one line per miss: the host's Python and JAX from
    the host's folder, the bundle's flax from its install, every row ok."""
    problems = [
        f"row {row.get('architecture')}: {row.get('status')}"
        for row in record.get("rows", [])
        if row.get("status") != "ok"
    ]
    environment = record.get("environment") or {}
    python = environment.get("python") or ""
    if not python.startswith(tpu_host.HOST_PYTHON + "."):
        problems.append(f"python is {python!r}, not {tpu_host.HOST_PYTHON}")
    packages = environment.get("packages") or {}
    sources = environment.get("package_sources") or {}
    expected = {
        **{name: (version, "host", host) for name, version in tpu_host.HOST_PACKAGES.items()},
        **{name: (version, "bundle", site) for name, version in tpu_host.BESIDE_HOST.items()},
    }
    for name, (version, source, folder) in expected.items():
        if name not in packages:
            continue  # not a recorded package (scipy): the install script checked it
        if packages[name] != version:
            problems.append(f"packages.{name} is {packages[name]}, not {version}")
        got = sources.get(name) or {}
        if (got.get("source"), got.get("location")) != (source, str(folder)):
            problems.append(f"package_sources.{name} is {got}, not {source} from {folder}")
    return problems


def tpu_host_smoke(session) -> None:
    """The session: `-- [benchmark_step.py flags]` (default: simple_dit and unet, 2 steps)."""
    _, args = session_flags("tpu-host-smoke", session.posargs, lambda parser: None)
    if not any(arg.startswith(("--architectures", "--cases")) for arg in args):
        args = [*DEFAULT_ARCHITECTURES, *args]
    python = host_python(session)
    started = time.monotonic()
    twin = Path(session.create_tmp()).resolve() / "tpu-host"
    shutil.rmtree(twin, ignore_errors=True)
    host, site = twin / "host", twin / "site"
    try:  # the host's own packages, hash checked, into the folder its PYTHONPATH names
        found = wheelhouse(tpu_host.HOST_LOCK, tpu_host.HOST_PYTHON, log=session.log)
    except EngineError as error:
        session.error(str(error))
    session.run(
        python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
        "--disable-pip-version-check", "--target", str(host), *map(str, found.glob("*.whl")),
        external=True, env=OFFLINE_PIP,
    )  # fmt: skip
    install = bundle.make(session, twin / "bundle", tpu_host.HOST_PYTHON)
    session.run(python, str(install), "--target", str(site), external=True,
                env={"PYTHONPATH": str(host)})  # fmt: skip
    prepared = time.monotonic() - started
    # What a user of the bundle types: its env.sh sourced, then the host's Python.
    interpreter = ["sh", "-c", '. "$0" && exec "$@"', str(site / "env.sh"), python]
    runner = Runner(session, interpreter=interpreter)
    run_dir = new_run_dir("cpu-smoke", "tpu-host-twin")
    step_args = ["--steps", "2", "--idle-check", "warn", *args]
    step_benchmark(runner, run_dir, "cpu-smoke", step_args, {**SMOKE_ENV, "PYTHONPATH": str(host)})
    record = json.loads((run_dir / "step.json").read_text())
    problems = check_record(record, host, site)
    if problems:
        session.error(f"the twin's record {run_dir / 'step.json'}: " + "; ".join(problems))
    session.log(
        f"tpu-host-smoke: the host's Python {record['environment']['python']} and jax "
        f"{record['environment']['packages']['jax']}, the bundle beside them: "
        f"{len(record['rows'])} rows ok; prepared in {prepared:.0f} s, "
        f"{time.monotonic() - started:.0f} s in all"
    )
