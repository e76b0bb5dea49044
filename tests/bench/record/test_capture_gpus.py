"""The record's cards (dew.bench.record.capture) and the idle check's GPU readings
(dew.bench.runtime.idle) on an NVML replaced at its boundary: pynvml's functions answer as
two recorded cards (the H200 of tests/telemetry/test_nvml.py and an H100 beside it). Only
the cards CUDA_VISIBLE_DEVICES shows are read; an NVML that refuses every call ends
nothing; every nvmlInit is shut down."""

from __future__ import annotations

import pynvml
import pytest
from telemetry.test_nvml import H200

from dew.bench.record import capture
from dew.bench.runtime import idle

UUIDS = ("GPU-aaaa-0000", "GPU-bbbb-1111")
NAMES = (b"NVIDIA H200", b"NVIDIA H100 80GB HBM3")


def _answer(value):
    return lambda *args: value


@pytest.fixture
def two_cards(monkeypatch):
    """pynvml answering as two cards; returns the init and shutdown calls it got."""
    calls = []
    memory = type("Memory", (), {"total": 141 * 2**30, "used": 2**30})
    answers = {
        **{name: _answer(value) for name, value in H200.items()},
        "nvmlDeviceGetApplicationsClock": H200["nvmlDeviceGetApplicationsClock"],
        "nvmlDeviceGetMaxClockInfo": H200["nvmlDeviceGetMaxClockInfo"],
        "nvmlDeviceGetMigMode": lambda handle: [0, 0],
        "nvmlInit": lambda: calls.append("init"),
        "nvmlShutdown": lambda: calls.append("shutdown"),
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": lambda index: index,
        "nvmlDeviceGetUUID": lambda handle: UUIDS[handle],
        "nvmlDeviceGetName": lambda handle: NAMES[handle],
        "nvmlDeviceGetMemoryInfo": lambda handle: memory,
        "nvmlSystemGetDriverVersion": lambda: b"580.159.03",
        "nvmlDeviceGetUtilizationRates": lambda handle: type("Rates", (), {"gpu": 30 + handle}),
        "nvmlDeviceGetComputeRunningProcesses": lambda handle: [],
    }
    for name, answer in answers.items():
        monkeypatch.setattr(pynvml, name, answer)
    return calls


@pytest.fixture
def refusing(two_cards, monkeypatch):
    """The same two cards, but every call after listing them raises (a card lost)."""

    def lost(*args):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    for name in dir(pynvml):
        if name.startswith(("nvmlDeviceGet", "nvmlSystemGet")) and name not in (
            "nvmlDeviceGetCount",
            "nvmlDeviceGetHandleByIndex",
        ):
            monkeypatch.setattr(pynvml, name, lost)
    return two_cards


@pytest.mark.parametrize(
    "visible, indices",
    [(None, [0, 1]), ("1", [1]), ("GPU-bbbb", [1]), ("1,0", [0, 1]), ("", [])],
)
def test_the_record_holds_only_the_cards_cuda_sees(two_cards, visible, indices):
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    env = capture.capture(devices=[], environ=environ)
    assert [card.index for card in env.gpus] == indices
    assert [card.uuid for card in env.gpus] == [UUIDS[i] for i in indices]
    if indices:  # the devices are the first visible card's, counted over the visible ones
        assert env.devices.kind == NAMES[indices[0]].decode()
        assert (env.devices.platform, env.devices.count) == ("gpu", len(indices))
    else:
        assert env.devices.platform == "cpu"
    assert env.driver_version == "580.159.03"
    assert two_cards == ["init", "shutdown"]


def test_a_mig_instance_records_every_card(two_cards):
    env = capture.capture(devices=[], environ={"CUDA_VISIBLE_DEVICES": "MIG-4f1a"})
    assert [card.index for card in env.gpus] == [0, 1]
    assert env.env_flags["CUDA_VISIBLE_DEVICES"] == "MIG-4f1a"  # which instance ran


def test_an_nvml_that_refuses_every_call_still_gives_a_record(refusing):
    env = capture.capture(devices=[], environ={"CUDA_VISIBLE_DEVICES": "0"})
    assert env.driver_version is None
    assert env.devices.kind is None and env.devices.memory_gib is None
    # Its UUID unreadable, card 0 is still CUDA's device 0; every field is null, and why.
    (card,) = env.gpus
    assert card.index == 0 and card.name is None and card.uuid is None
    assert "GpuIsLost" in card.unreadable["name"]
    assert refusing == ["init", "shutdown"]


def test_the_idle_check_reads_only_the_cards_cuda_sees(two_cards, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb")
    check = idle.sample(window_s=0.2, watch=[])
    (card,) = check.gpus
    assert (card.index, card.util_percent) == (1, 31.0)
    assert check.reasons == ["GPU 1 was 31% busy"] and check.note.startswith("judged on")
    assert two_cards == ["init", "shutdown"]


def test_the_idle_check_says_when_it_reads_every_card(two_cards, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4f1a")
    check = idle.sample(window_s=0.2)
    assert [card.index for card in check.gpus] == [0, 1]
    assert "CUDA_VISIBLE_DEVICES names a MIG instance (MIG-4f1a): every card read" in check.note
    assert two_cards == ["init", "shutdown"]


def test_an_nvml_that_refuses_every_call_leaves_the_idle_check_standing(refusing, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    check = idle.sample(window_s=0.2, watch=[])
    assert [(g.index, g.util_percent, g.memory_used_gib) for g in check.gpus] == [
        (0, None, None),
        (1, None, None),
    ]
    assert check.idle is True
    assert refusing == ["init", "shutdown"]
