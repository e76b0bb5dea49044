"""`nox -s bench-gpu` up to the device: the engine's GPU arguments on the argv run_argv
builds, the host checks that refuse a host without the NVIDIA toolkit or CDI spec before
anything is built, the step benchmark's flags and environment (repeats fresh compiles,
the seed's allocator), and the whole session driven end to end with the GPU absent.

What stands in for the device, and only at the engine's boundary: `nvidia-smi` is a script
printing a recorded H200 line; the CDI spec is a file in a temporary DEW_CDI_DIRS; docker
(not installed here) is a script answering `version` and `info` as a docker host without
the toolkit answers; and in the end-to-end test `podman` on PATH is a shim that forwards to
the real podman with the GPU arguments removed and JAX_PLATFORMS=cuda made cpu (8
simulated devices). The real session, image, tool, loader and compare run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from container_support import nox_command, reused_venv, unavailable

from dew.host import benchmarks as bench
from dew.host import engine as containers
from dew.host import gpu_checks as gpu
from dew.host import image as images
from dew.host import runner
from dew.host.sessions import bench_gpu

ROOT = Path(__file__).resolve().parents[2]
H200 = "NVIDIA H200, 580.95.05"  # nvidia-smi --query-gpu=name,driver_version, recorded


# --- the engine's GPU arguments, on the argv run_argv builds -------------------------------


def _image(ref: str = "localhost/dew:cuda13-test") -> object:
    return images.Image(ref, "sha256:" + "0" * 64, "cuda13", "base", "base@sha256:1", "lock",
                        False, 0.0)  # fmt: skip


def _argv(name: str, gpu_on: bool) -> list[str]:
    engine = containers.Engine(name, "0")
    engine.run_flags = []  # what host_run_flags found; no container is started here
    image = _image()
    runner._IMAGE_USERS[image.ref] = (10001, 10001)  # what `id -u; id -g` in dew's image says
    probe = ["python", "-c", "print(1)"]
    argv = runner.run_argv(engine, image, probe, env=gpu.GPU_ENV, gpu=gpu_on)
    return argv[argv.index(name) :]  # from the engine on (a root caller's wrapper before it)


def _pairs(argv: list[str]) -> list[tuple[str, str]]:
    return list(zip(argv, argv[1:], strict=False))


def test_docker_gives_the_container_every_gpu_with_gpus_all():
    argv = _argv("docker", gpu_on=True)
    assert argv[:3] == ["docker", "run", "--rm"]
    assert ("--gpus", "all") in _pairs(argv)
    assert not any("nvidia.com/gpu" in arg or "label=disable" in arg for arg in argv)
    assert argv.index("--gpus") < argv.index("localhost/dew:cuda13-test")  # an engine flag


def test_podman_gets_the_cdi_device_with_selinux_labels_off():
    argv = _argv("podman", gpu_on=True)
    assert argv[:3] == ["podman", "run", "--rm"]
    assert ("--device", "nvidia.com/gpu=all") in _pairs(argv)
    assert "--security-opt=label=disable" in argv
    assert "--gpus" not in argv
    assert argv.index("--security-opt=label=disable") < argv.index("localhost/dew:cuda13-test")


def test_no_gpu_arguments_without_gpu():
    for name in ("docker", "podman"):
        argv = _argv(name, gpu_on=False)
        assert not {"--gpus", "--device", "--security-opt=label=disable"} & set(argv)


def test_the_gpu_probe_runs_with_the_seeds_allocator_settings():
    argv = _argv("podman", gpu_on=True)
    given = {b for a, b in _pairs(argv) if a == "-e"}
    assert {"JAX_PLATFORMS=cuda", "XLA_PYTHON_CLIENT_PREALLOCATE=false",
            "XLA_PYTHON_CLIENT_MEM_FRACTION=0.8"} <= given  # fmt: skip


# --- the step benchmark's flags and environment -------------------------------------------------


def test_bench_gpus_environment_is_the_seeds_rerun():
    assert gpu.GPU_ENV == {
        "JAX_PLATFORMS": "cuda",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.8",
    }
    rerun = ROOT / "results" / "published" / "2026-09-05-rtx4080-9886c20-rerun.json"
    recorded = json.loads(rerun.read_text())["environment"]["env_flags"]
    assert {key: recorded[key] for key in gpu.GPU_ENV} == gpu.GPU_ENV


def test_bench_gpus_repeats_are_fresh_compiles_not_one_cached_executable():
    flags = bench_gpu.step_args(["--architectures", "unet"])
    assert flags == ["--idle-check", "error", "--gpu-check", "error", "--repeats", "3",
                     "--architectures", "unet"]  # fmt: skip
    assert bench.compilation_cache_args(flags, in_image=True) == ["--compilation-cache-dir", "off"]
    for repeats in (["--repeats", "2"], ["--repeats=5"], ["--repeats", "auto"]):
        flags = bench_gpu.step_args(repeats)
        assert flags.count("--repeats") + sum(a.startswith("--repeats=") for a in flags) == 1
        assert bench.compilation_cache_args(flags, in_image=True)[-1] == "off"


def test_a_single_run_keeps_the_mounted_cache_and_the_users_cache_wins():
    cache = bench.compilation_cache_args
    assert cache([], in_image=True) == ["--compilation-cache-dir", containers.IMAGE_XLA_CACHE]
    assert cache(["--repeats", "1"], in_image=True)[-1] == containers.IMAGE_XLA_CACHE
    # the tool's parser keeps the last --repeats, so does the choice of cache
    assert cache(["--repeats", "3", "--repeats", "1"], in_image=True)[-1] == "/cache/xla"
    assert cache(["--repeats", "1", "--repeats=3"], in_image=True)[-1] == "off"
    assert cache([], in_image=False) == []
    assert cache(["--repeats", "3"], in_image=False) == ["--compilation-cache-dir", "off"]
    assert cache(["--repeats", "3", "--compilation-cache-dir", "/x"], in_image=True) == []
    assert cache(["--compilation-cache-dir=/x"], in_image=True) == []


# --- the engine's NVIDIA support --------------------------------------------------------------


def _spec(directory: Path, name: str, kind: str = "nvidia.com/gpu") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    spec = directory / name
    spec.write_text(f"cdiVersion: 0.5.0\nkind: {kind}\ndevices:\n- name: all\n")
    return spec


def test_cdi_specs_are_found_by_kind_in_the_given_directories(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _spec(a, "amd.yaml", kind="amd.com/gpu")
    assert gpu.cdi_specs([a, b]) == []
    found = _spec(b, "nvidia.json")
    assert gpu.cdi_specs([a, b]) == [found]
    assert gpu.cdi_dirs({"DEW_CDI_DIRS": f"{a}{os.pathsep}{b}"}) == [a, b]
    assert gpu.cdi_dirs({}) == [Path("/etc/cdi"), Path("/var/run/cdi")]
    podman = containers.Engine("podman", "0")
    assert gpu.toolkit_problem(podman, {"DEW_CDI_DIRS": str(b)}) is None
    problem = gpu.toolkit_problem(podman, {"DEW_CDI_DIRS": str(a)})
    assert problem.startswith(f"podman finds no CDI spec naming nvidia.com/gpu in {a}: ")
    assert "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in problem


# --- the refusals, through the real session -------------------------------------------------------


def _script(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def _session(posargs, env, timeout=120, own_venv: bool = False) -> subprocess.CompletedProcess:
    """`nox -s bench-gpu`: in no venv, or with this test's own reused as the session's."""
    argv = [*nox_command(), "-f", str(ROOT / "noxfile.py"), "-s", "bench-gpu"]
    if own_venv:
        argv += reused_venv("bench-gpu", Path(env["DEW_CDI_DIRS"]).parent / "envdir")
    else:
        argv += ["--force-venv-backend", "none", "--no-install"]
    argv += ["--", *posargs]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def _error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [
        line for line in result.stderr.splitlines() if line.startswith("nox -s bench-gpu: error: ")
    ]


def _host(tmp_path: Path, **extra) -> dict[str, str]:
    """PATH with the recorded nvidia-smi first (and whatever `extra` scripts), this Python's
    directory next (the session's record readers), then the rest."""
    fakes = tmp_path / "bin"
    _script(fakes, "nvidia-smi", f"echo '{H200}'\n")
    for name, body in extra.items():
        _script(fakes, name, body)
    path = os.pathsep.join([str(fakes), str(Path(sys.executable).parent), os.environ["PATH"]])
    return dict(os.environ, PATH=path, DEW_CDI_DIRS=str(tmp_path / "cdi"))


def _podman():
    try:
        return containers.choose({"DEW_ENGINE": "podman"})
    except containers.EngineError:
        unavailable("podman does not answer here")


def test_podman_without_a_cdi_spec_is_refused_before_anything_is_built(tmp_path):
    _podman()
    env = dict(_host(tmp_path), DEW_ENGINE="podman")
    _spec(tmp_path / "cdi", "other.yaml", kind="vendor.example/fpga")
    started = time.monotonic()
    result = _session(["--architectures", "simple_dit"], env)
    assert result.returncode == 2, result.stderr[-2000:]
    assert _error_lines(result) == [
        "nox -s bench-gpu: error: podman finds no CDI spec naming nvidia.com/gpu in "
        f"{tmp_path / 'cdi'}: "
        "generate it with `sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` "
        "(NVIDIA Container Toolkit)"
    ]
    assert "building" not in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - started < 60


def test_docker_without_the_nvidia_toolkit_is_refused_before_anything_is_built(tmp_path):
    # docker as a docker host without the toolkit answers: a daemon, runc only.
    docker = (
        'case "$1" in\n'
        "  version) echo 27.5.1 ;;\n"
        '  info) echo \'{"io.containerd.runc.v2":{"path":"runc"},"runc":{"path":"runc"}}\' ;;\n'
        '  *) echo "unexpected: docker $*" >&2; exit 9 ;;\n'
        "esac\n"
    )
    env = dict(_host(tmp_path, docker=docker), DEW_ENGINE="docker")
    if any(shutil.which(tool, path=env["PATH"]) for tool in gpu.TOOLKIT_TOOLS):
        pytest.skip("this host has the NVIDIA Container Toolkit's tools on PATH")
    result = _session([], env)
    assert result.returncode == 2, result.stderr[-2000:]
    assert _error_lines(result) == [
        "nox -s bench-gpu: error: docker has no NVIDIA Container Toolkit here "
        "(no `nvidia` runtime in "
        "`docker info`, none of nvidia-container-cli, nvidia-ctk, nvidia-container-runtime-hook "
        "on PATH): install it, then `sudo nvidia-ctk runtime configure --runtime=docker && "
        "sudo systemctl restart docker`"
    ]
    assert "unexpected" not in result.stderr  # nothing but version and info was asked


def test_docker_with_the_nvidia_runtime_passes_the_toolkit_check(tmp_path, monkeypatch):
    docker = 'echo \'{"nvidia":{"path":"nvidia-container-runtime"},"runc":{}}\'\n'
    monkeypatch.setenv("PATH", _host(tmp_path, docker=docker)["PATH"])
    engine = containers.Engine("docker", "27.5.1")
    assert gpu.docker_runtimes(engine) == ["nvidia", "runc"]
    assert gpu.toolkit_problem(engine) is None


def test_the_sessions_own_flags_come_out_and_the_rest_goes_to_the_tool_in_order():
    argv = ["--steps", "50", "--variant=cuda12", "--xla-flags", "--xla_gpu_foo=1", "--data.path",
            "/data", "--base-image", "base:1", "--architectures", "unet"]  # fmt: skip
    own, rest = bench.session_flags("bench-gpu", argv, bench_gpu.own_flags)
    assert (own.variant, own.base_image, own.data_path) == ("cuda12", "base:1", "/data")
    assert rest == ["--steps", "50", "--xla-flags", "--xla_gpu_foo=1", "--architectures", "unet"]
    with pytest.raises(SystemExit) as stop:  # one line, exit 2
        bench.session_flags("bench-gpu", ["--base-image"], bench_gpu.own_flags)
    assert stop.value.code == 2


def test_an_old_driver_and_a_bad_variant_are_one_line_exit_2(tmp_path):
    _podman()
    env = dict(_host(tmp_path), DEW_ENGINE="podman")
    _script(tmp_path / "bin", "nvidia-smi", "echo 'NVIDIA H200, 550.54.15'\n")
    result = _session([], env)
    assert result.returncode == 2
    assert _error_lines(result) == [
        "nox -s bench-gpu: error: driver 550.54.15 is older than cuda13 needs (580+): "
        "update the NVIDIA driver or use --variant cuda12"
    ]
    result = _session(["--variant", "cuda11"], env)
    assert result.returncode == 2
    assert _error_lines(result) == [
        "nox -s bench-gpu: error: --variant 'cuda11' is not one of: cuda12, cuda13"
    ]


# --- the whole session, the GPU absent ---------------------------------------------------------

# The shim named `podman`: the real podman with the GPU's device removed (this host has no
# CDI spec's devices to give) and JAX on the CPU, 8 simulated devices; every `run` it was
# asked for is kept (as asked) in its log. Everything else is forwarded unchanged.
SHIM = """#!{python}
import json, os, sys
args = sys.argv[1:]
devices = "XLA_FLAGS=--xla_force_host_platform_device_count=8"
if args[:1] == ["run"]:
    with open({log!r}, "a") as log:
        log.write(json.dumps(args) + "\\n")
    given, args = args, []
    for index, arg in enumerate(given):
        if arg.startswith("nvidia.com/gpu=") and args[-1:] == ["--device"]:
            args.pop()
        elif arg == "JAX_PLATFORMS=cuda" and args[-1:] == ["-e"]:
            args += ["JAX_PLATFORMS=cpu", "-e", devices]
        else:
            args.append(arg)
os.execv({podman!r}, [{podman!r}, *args])
"""


def _flowers(directory: Path) -> Path:
    """A prepared oxford_flowers102 version directory of 12 synthetic JPEGs (the real
    format), readable by the image's user."""
    import numpy as np
    from scipy.io import savemat

    from dew.data.oxford_flowers import prepare_from_original
    from dew.data.synthetic import synthetic_record

    original = directory / "102flowers"
    (original / "jpg").mkdir(parents=True)
    for image_id in range(1, 13):
        jpeg = synthetic_record(7, image_id, (64, 96))["image"]
        (original / "jpg" / f"image_{image_id:05d}.jpg").write_bytes(jpeg)
    savemat(original / "imagelabels.mat", {"labels": np.arange(1, 13, dtype=np.uint8)[None]})
    setid = {"trnid": range(1, 9), "valid": range(9, 11), "tstid": range(11, 13)}
    savemat(original / "setid.mat", {k: np.array([list(v)], np.uint16) for k, v in setid.items()})
    out = prepare_from_original(original, directory / "oxford_flowers102" / "2.1.1")
    for path in [out, *out.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return out


def _run_dir(stderr: str, started: float) -> Path | None:
    for line in stderr.splitlines():
        if "record: results/runs/" in line and "-small-nvidia-h200-" in line:
            return ROOT / line.split("record: ", 1)[1].strip().rsplit("/", 1)[0]
    made = [d for d in (ROOT / "results" / "runs").glob("*-small-nvidia-h200-*")
            if d.stat().st_mtime >= started]  # fmt: skip
    return made[0] if len(made) == 1 else None


@pytest.mark.slow  # the slow tier: CI runs it (.ci/run), `nox -s tests` leaves it
@pytest.mark.container
def test_bench_gpu_runs_end_to_end_with_the_gpu_replaced_at_the_engine(tmp_path):
    """preflight, image, the GPU seen in the image, the idle check, the --gpu-check gate,
    the step benchmark (2 repeats, each compiled), the loader, compare; the idle check in
    warn (this host is shared: it samples and records, and does not refuse), the gate in
    error (on CPU it passes, its row saying there is no NVIDIA GPU)."""
    assert _podman() is not None
    if sys.prefix == sys.base_prefix:
        pytest.skip("the session's record readers need a venv from locks/dev.txt (nox -s tests)")
    log = tmp_path / "podman-runs.jsonl"
    shim = SHIM.format(python=sys.executable, log=str(log), podman=shutil.which("podman"))
    env = dict(_host(tmp_path, podman=""), DEW_ENGINE="podman")
    (tmp_path / "bin" / "podman").write_text(shim)
    _spec(tmp_path / "cdi", "nvidia.yaml")
    data = _flowers(tmp_path / "data")
    # A small-preset simple_dit step takes about 6 s on CPU: no warmup, windows of one step
    # (the flow is under test, not the figures).
    posargs = ["--data.path", str(data), "--architectures", "simple_dit", "--steps", "1",
               "--warmup", "0", "--repeats", "2", "--idle-check", "warn"]  # fmt: skip
    started = time.time()
    run_dir = None
    try:
        result = _session(posargs, env, timeout=3600, own_venv=True)
        run_dir = _run_dir(result.stderr, started)
        assert result.returncode == 0, result.stderr[-4000:]
        assert run_dir is not None, result.stderr[-2000:]
        # The probe saw JAX's devices through the engine (the shim's 8 CPU devices).
        assert "the GPU through podman: 8 cpu device(s)" in result.stderr
        # Every command of the session in the CUDA image asked for the GPU; the probe and the
        # step benchmark with the seed's allocator settings.
        runs = [json.loads(line) for line in log.read_text().splitlines()]
        in_image = [r for r in runs if "python" in r and any("cuda13" in a for a in r)]
        assert len(in_image) == 7  # probe, step, validate, 2 loaders, their validates
        for asked in in_image:
            assert ("--device", "nvidia.com/gpu=all") in _pairs(asked)
            assert "--security-opt=label=disable" in asked
        gpu_env = {f"{key}={value}" for key, value in gpu.GPU_ENV.items()}
        probe = next(r for r in in_image if "-c" in r)
        assert gpu_env <= set(probe)
        step = next(r for r in in_image if "tools/benchmark_step.py" in r)
        assert gpu_env <= set(step)
        tool = step[step.index("tools/benchmark_step.py") :]
        assert ("--compilation-cache-dir", "off") in _pairs(tool)
        assert ("--repeats", "2") in _pairs(tool) and ("--gpu-check", "error") in _pairs(tool)

        record = json.loads((run_dir / "step.json").read_text())
        assert record["environment"]["container"]["variant"] == "cuda13"
        assert record["settings"]["options"]["compilation_cache_dir"] == "off"
        flags = record["environment"]["env_flags"]
        assert flags["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
        assert flags["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.8"
        assert record["idle_check"]["mode"] == "warn" and record["idle_check"]["window_s"]
        [row] = record["rows"]
        assert row["status"] == "ok", row.get("error")
        assert row["gpu"]["check"] == "error"
        assert row["gpu"]["note"] == "no NVIDIA GPU: platform cpu"
        assert len(row["repeats"]) == 2
        assert all(r["compile_s"] for r in row["repeats"])  # each repeat compiled its own
        for name in ("data-workers-0.json", "data-workers-8.json", "compare.md", "compare.json"):
            assert (run_dir / name).is_file(), name
        verdicts = (run_dir / "compare.json").read_text()
        assert verdicts.strip(), f"compare.json is empty; the session said: {result.stderr[-3000:]}"
        assert json.loads(verdicts)["kind"] == "step"
    finally:
        # A CPU run named for an H200 must not stay among the runs: it goes to the test's
        # temporary directory (pytest keeps the last few), where a failure can be read.
        if run_dir is not None and run_dir.exists():
            shutil.move(run_dir, tmp_path / "run")
