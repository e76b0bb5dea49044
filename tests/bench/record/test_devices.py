"""A device's identity as the process that holds it reads it (dew.bench.record.devices): a
TPU faked at its boundary (platform, device_kind, coords, memory_stats, the client's
platform_version), the record that names it, and an old record that guessed cpu."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from dew import platforms
from dew.bench.record import devices as identity
from dew.bench.record.capture import capture
from dew.bench.record.schema import read_run
from dew.bench.sweep.preflight import Devices as ProbeMessage

REPO = Path(__file__).resolve().parents[3]
CPU_RECORD = REPO / "results/runs/20261203T072630Z-cpu-smoke-two-cpu-d90a3f0/step.json"
V5E_BYTES = 16_909_336_064  # what one v5e chip's memory_stats said on the device tool's host


class FakeTpu:
    """What jax hands a process holding a TPU v5e chip, as far as dew reads it."""

    platform, device_kind = "tpu", "TPU v5 lite"

    def __init__(self, coords=(0, 0, 0)):
        self.coords = coords
        self.client = SimpleNamespace(platform_version="PJRT C API\nTFRT TPU v5 lite")

    def memory_stats(self):
        return {"bytes_limit": V5E_BYTES, "bytes_in_use": 26_624, "peak_bytes_in_use": 26_624}


def test_a_tpu_is_named_as_the_process_holding_it_reads_it():
    read = identity.read([FakeTpu()], environ={})
    assert (read.platform, read.kind, read.count) == ("tpu", "TPU v5 lite", 1)
    assert read.memory_gib == pytest.approx(15.75)
    assert (read.topology, read.coords) == ("v5e:1x1", [[0, 0, 0]])
    assert read.read_by == "the process that held them"


def test_four_chips_form_their_slice_and_an_unknown_kind_none():
    chips = [FakeTpu(coords) for coords in ((0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0))]
    assert identity.read(chips, environ={}).topology == "v5e:2x2"
    assert platforms.get("tpu").topology("TPU v9 imaginary", [[0, 0, 0]]) is None


def test_the_backend_is_read_as_it_stands_after_import():
    environ = {"LIBTPU_INIT_ARGS": " --xla_tpu_use_enhanced_launch_barrier=true",
               "TPU_WORKER_ID": "0", "XLA_FLAGS": "--xla_dump_to=/tmp/x", "HOME": "/home/u",
               "TPU_SERVICE_TOKEN": "secret"}  # fmt: skip
    backend = identity.backend([FakeTpu()], environ=environ)
    assert backend.platform_version == "PJRT C API\nTFRT TPU v5 lite"
    assert set(backend.env_after_import) == {"LIBTPU_INIT_ARGS", "TPU_WORKER_ID", "XLA_FLAGS"}
    assert backend.transparent_hugepages  # its setting, or why it could not be read


def test_the_record_names_what_the_device_probe_read():
    """The run's parent opens no backend: its record's devices are the probe's, with the
    count the cases get (the simulated CPU mesh adds devices after the probe ran)."""
    probe = ProbeMessage(
        "tpu", 1, "TPU v5 lite",
        identity.read([FakeTpu()], environ={}).model_dump(mode="json"),
        identity.backend([FakeTpu()], environ={}).model_dump(mode="json"),
    )  # fmt: skip
    environment = capture(identity=probe.for_record())
    assert environment.devices.platform == "tpu" and environment.devices.topology == "v5e:1x1"
    assert environment.backend.platform_version.endswith("TPU v5 lite")
    read = {"platform": "cpu", "kind": "cpu", "count": 1, "memory_gib": None}
    cpu = ProbeMessage("cpu", 8, "cpu", read, {"platform_version": "cpu"})
    assert cpu.for_record()[0].count == 8


def test_a_record_that_guessed_cpu_for_rows_run_on_a_tpu_is_refused(tmp_path, capsys):
    """Before the devices were read by the process that held them, a run on a TPU said cpu;
    its rows' gpu notes say where they ran. Such a record is refused in one line."""
    from dew.bench.analysis import compare_command
    from dew.bench.record import validate

    record = json.loads(CPU_RECORD.read_text())
    assert record["environment"]["devices"].get("read_by") is None
    record["rows"][0]["gpu"] = {"check": "warn", "note": "no NVIDIA GPU: platform tpu"}
    bad = tmp_path / "tpu-said-cpu.json"
    bad.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="ran on platform tpu but the devices say cpu"):
        read_run(bad)
    assert validate.main([str(bad)]) == 1
    assert "ran on platform tpu but the devices say cpu" in capsys.readouterr().err
    assert compare_command.main([str(bad), str(shutil.copy(CPU_RECORD, tmp_path))]) == 2
    assert "ran on platform tpu but the devices say cpu" in capsys.readouterr().err
    # the same record with its devices read by the process that held them stands
    record["environment"]["devices"]["read_by"] = "the process that held them"
    bad.write_text(json.dumps(record))
    assert read_run(bad).environment.devices.platform == "cpu"
