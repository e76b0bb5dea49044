"""Platforms as units (dew.platforms): a fourth one added in one module and registered,
named by the record a real run on it writes; a ROCm GPU, which JAX calls "gpu" as it does
an NVIDIA card, named as what it is and given none of NVIDIA's paths."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jax
import pytest

from dew import platforms
from dew.bench.analysis import judge
from dew.bench.analysis.levels import noise
from dew.bench.common.cli import UsageError
from dew.bench.record import devices as identity
from dew.bench.record import stack
from dew.bench.record.schema import read_run

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def test_a_toy_platform_in_one_module_claims_the_devices_and_brings_its_own_facts():
    with platforms.registered():
        import toy_platform  # registers itself, as the entry point's import does

        TOY = platforms.register(toy_platform.TOY)  # again where another test imported it
        assert platforms.of_devices(jax.devices()) is TOY
        read = identity.read(jax.devices(), environ={})
        assert (read.platform, read.kind) == ("toy", "cpu")
        assert noise.prior("toy", "cpu").process == 0.3 and judge.band_for("toy") == 0.1
        assert stack.recorded_variant({"environment": {"devices": {"platform": "toy"}}}) is None
    assert platforms.of_devices(jax.devices()).name == "cpu"  # gone with its block


def test_a_topology_is_compiled_for_by_its_platform_and_a_foreign_name_is_refused():
    """dew.train.executables.topology_devices asks the platform that owns the name: "cpu"
    the host's CPU (the held-chip path's tests), a CHIP:AxB name the TPU's module; a toy
    platform's own topology is its own; a name no platform owns is one ValueError."""
    from dew.train.executables import topology_devices

    assert platforms.of_topology("v5e:2x4").name == "tpu"
    assert platforms.of_topology("v4:2x2x1").name == "tpu"
    assert topology_devices("cpu") == jax.devices("cpu")
    with platforms.registered():
        import toy_platform

        platforms.register(toy_platform.TOY)  # a module is imported once: again here
        assert topology_devices("toy:1") == jax.devices("cpu")[:1]
    for foreign in ("v5e", "v5e:1x1x1x1", "toy:1", "CPU"):
        with pytest.raises(ValueError, match=f"topology {foreign!r} is no platform's .*tpu"):
            topology_devices(foreign)
    # the refusal says each platform's names in words where it has them, else its pattern
    with pytest.raises(ValueError) as refused:
        platforms.of_topology("v5e")
    assert "tpu: CHIP:AxB or CHIP:AxBxC, e.g. v5e:1x1" in str(refused.value)
    assert "cpu: cpu" in str(refused.value) and "\\d" not in str(refused.value)
    with platforms.registered():
        platforms.register(toy_platform.TOY)
        with pytest.raises(ValueError, match=r"toy: toy:\\d\+"):
            platforms.of_topology("v5e")


def _declared(folder: Path) -> dict[str, str]:
    """An environment whose Pythons find the toy platform through the `dew.platforms` entry
    point of a distribution installed in `folder` (its metadata, the module beside it)."""
    info = folder / "dew_toy_platform-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dew-toy-platform\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[dew.platforms]\ntoy = toy_platform\n")
    (folder / "toy_platform.py").write_text((HERE / "toy_platform.py").read_text())
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}  # fmt: skip


def test_a_record_made_on_the_toy_platform_names_it(tmp_path):
    """`tools/benchmark_step.py` as a user runs it: its device probe, the case's process
    and the record all see the toy platform the entry point registers."""
    out = tmp_path / "toy.json"
    command = [
        sys.executable, "tools/benchmark_step.py",
        "--preset", "cpu-smoke", "--architectures", "simple_dit",
        "--steps", "1", "--warmup", "0", "--json-out", str(out),
        "--compilation-cache-dir", "off", "--idle-check", "off",
    ]  # fmt: skip
    env = _declared(tmp_path / "site")
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    record = read_run(out)
    assert record.environment.devices.platform == "toy"
    (row,) = record.rows
    assert row.status == "ok" and row.util is None
    assert row.gpu.note == "no NVIDIA GPU: platform toy"
    assert "platform toy: a toy, with no peak FLOP/s" in row.note  # what its rows lack


class RocmGpu:
    """What jax hands a process holding an AMD GPU, as far as dew reads it: platform "gpu",
    like an NVIDIA card; the vendor is in the device kind and the backend's version."""

    platform, device_kind, coords = "gpu", "AMD Instinct MI250X", None
    client = SimpleNamespace(platform_version="PJRT C API\nrocm 60032")

    def memory_stats(self):
        return {"bytes_limit": 64 * 1024**3, "peak_bytes_in_use": 1024}


class NoNvml:
    """An NVML session that fails the test when anything reads it."""

    def __getattr__(self, name):
        raise AssertionError(f"NVML read on a ROCm GPU ({name})")

    def __bool__(self):
        raise AssertionError("NVML asked on a ROCm GPU")


def test_a_rocm_gpu_is_named_rocm_and_read_without_nvml(monkeypatch):
    from dew.telemetry import nvml

    monkeypatch.setattr(nvml, "session", NoNvml)
    read = identity.read([RocmGpu()], environ={}, gpus=NoNvml())
    assert (read.platform, read.kind, read.memory_gib) == ("rocm", "AMD Instinct MI250X", None)
    rocm = platforms.get("rocm")
    assert platforms.of_devices([RocmGpu()]).name == "rocm"
    assert "util null" in rocm.lacks and "no memory reading" in rocm.lacks  # its rows' note
    assert not rocm.nvml and not rocm.attention and rocm.executor is None
    gpu = platforms.get("gpu")
    assert noise.prior("rocm", read.kind).process != gpu.noise.process  # not the GPU prior
    assert judge.band_for("rocm") > judge.band_for("gpu")
    assert stack.recorded_variant({"environment": {"devices": {"platform": "rocm"}}}) is None


def test_a_rocm_row_has_no_gpu_window_and_no_cudnn_attention(monkeypatch):
    from dew.bench.sweep import case_run, preflight
    from dew.telemetry import nvml

    monkeypatch.setattr(nvml, "session", NoNvml)
    options = SimpleNamespace(gpu_check="warn")
    state, gpu = case_run.gpu_window(None, "state", options, [RocmGpu()])
    assert state == "state" and gpu.note == "no NVIDIA GPU: platform rocm"
    devices = preflight.Devices("rocm", 1, "AMD Instinct MI250X")
    run = SimpleNamespace(mesh={}, attention_impl="cudnn", preset="small")
    case = SimpleNamespace(batch=8, step=None, attention_impl=None)
    with pytest.raises(UsageError, match="attention_impl cudnn needs an NVIDIA GPU.*rocm"):
        preflight.check_devices(run, [case], devices)


def test_each_stack_runs_on_its_platform_and_an_unknown_one_on_none():
    """The host side asks which platform a --variant runs on (its checks, its preset, its
    JAX_PLATFORMS), never the variant's name."""
    assert platforms.of_variant("cpu").host_cores and platforms.of_variant("cuda12").nvml
    assert platforms.of_variant("tpu-host").stack_variant == stack.TPU_HOST
    assert platforms.of_variant("cuda13").jax_platforms == "cuda"
    rocm = platforms.of_variant("rocm6")
    assert not (rocm.nvml or rocm.host_cores or rocm.jax_platforms)
