"""dew.telemetry.clocks against NVML replaced at the boundary (tests/infra/fake_nvml.py: an
H200's recorded answers, pynvml's own errors, every set and reset call kept): what each
mode asks NVML for, that every lock is reset however the block ends, and the refusals."""

from __future__ import annotations

import contextlib
import re

import pytest
from infra.fake_nvml import (
    NO_PERMISSION,
    NOT_SUPPORTED,
    TDP_READ_MHZ,
    FakeNvml,
    opener,
    set_and_reset,
)

from dew.bench.common.errors import Interrupted
from dew.bench.record.schema.environment import LockedClocks
from dew.telemetry import clocks, nvml

TDP = 0xFFFFFF01  # nvml.h: NVML_CLOCK_LIMIT_ID_TDP


@pytest.fixture(autouse=True)
def no_settling(monkeypatch):
    monkeypatch.setattr(clocks, "SETTLE_S", 0.0)


def lock(nv: FakeNvml, mode: str = "max", visible: str | None = None):
    return clocks.locked(mode, visible=visible, open_session=opener(nv))


def test_max_locks_sm_then_memory_per_card_and_resets_the_last_card_first():
    nv = FakeNvml(cards=2)
    with lock(nv, "max") as held:
        during = set_and_reset(nv.calls)
        assert [(c.sm_clock_read_mhz, c.memory_clock_read_mhz) for c in held.cards] == [
            (1980, 3201),
            (1980, 3201),
        ]
    assert during == [
        ("nvmlDeviceSetGpuLockedClocks", 0, 1980, 1980),
        ("nvmlDeviceSetMemoryLockedClocks", 0, 3201, 3201),
        ("nvmlDeviceSetGpuLockedClocks", 1, 1980, 1980),
        ("nvmlDeviceSetMemoryLockedClocks", 1, 3201, 3201),
    ]
    assert set_and_reset(nv.calls)[4:] == [
        ("nvmlDeviceResetMemoryLockedClocks", 1),
        ("nvmlDeviceResetGpuLockedClocks", 1),
        ("nvmlDeviceResetMemoryLockedClocks", 0),
        ("nvmlDeviceResetGpuLockedClocks", 0),
    ]
    assert nv.calls[-1] == ("nvmlShutdown",) and not nv.locked
    record = LockedClocks.model_validate(held.fields())
    assert record.restored and record.mode == "max"
    assert (record.cards[1].uuid, record.cards[1].sm_clock_mhz) == ("GPU-h200-1", 1980)
    assert record.cards[1].memory_clock_mhz == 3201


def test_base_locks_the_sm_clock_to_the_tdp_limit_which_names_no_mhz():
    nv = FakeNvml()
    with lock(nv, "base") as held:
        card = held.cards[0]
    assert set_and_reset(nv.calls)[:2] == [
        ("nvmlDeviceSetGpuLockedClocks", 0, TDP, TDP),
        ("nvmlDeviceSetMemoryLockedClocks", 0, 3201, 3201),
    ]
    assert card.sm_clock_mhz is None and card.sm_clock_read_mhz == TDP_READ_MHZ
    assert LockedClocks.model_validate(held.fields()).cards[0].sm_clock_mhz is None


@pytest.mark.parametrize(
    "stop", [RuntimeError("a case crashed the run"), Interrupted(15)], ids=["error", "SIGTERM"]
)
def test_the_locks_are_reset_when_the_block_ends_by_an_exception_or_a_stop_signal(stop):
    nv = FakeNvml(cards=2)
    with pytest.raises(type(stop)):
        with lock(nv) as held:
            raise stop
    assert held.restored and not nv.locked
    assert set_and_reset(nv.calls)[-1] == ("nvmlDeviceResetGpuLockedClocks", 0)
    assert nv.calls[-1] == ("nvmlShutdown",)


def test_no_permission_is_refused_after_resetting_the_cards_locked_before_it():
    nv = FakeNvml(cards=2, fail={("nvmlDeviceSetGpuLockedClocks", 1): NO_PERMISSION})
    with pytest.raises(clocks.Refused) as refused:
        with lock(nv):
            pytest.fail("the block must not run")
    assert str(refused.value) == (
        "NVML has no permission to lock card 1's SM clock "
        "(NVMLError_NoPermission: Insufficient Permissions)"
    )
    assert refused.value.fix == "run as root"
    assert set_and_reset(nv.calls)[-2:] == [
        ("nvmlDeviceResetMemoryLockedClocks", 0),
        ("nvmlDeviceResetGpuLockedClocks", 0),
    ]
    assert not nv.locked and nv.calls[-1] == ("nvmlShutdown",)


def test_a_card_that_cannot_lock_its_memory_clock_keeps_it_and_says_so():
    nv = FakeNvml(fail={("nvmlDeviceSetMemoryLockedClocks", 0): NOT_SUPPORTED})
    with lock(nv) as held:
        card = held.cards[0]
    assert card.memory_clock_mhz is None and card.memory_clock_read_mhz == 3201
    assert card.note.startswith("memory clock not locked: the card does not support it")
    assert set_and_reset(nv.calls)[-1:] == [("nvmlDeviceResetGpuLockedClocks", 0)]
    assert "nvmlDeviceResetMemoryLockedClocks" not in {call[0] for call in nv.calls}


def test_a_card_that_cannot_lock_its_sm_clock_is_refused_with_no_fix_but_off():
    nv = FakeNvml(fail={("nvmlDeviceSetGpuLockedClocks", 0): NOT_SUPPORTED})
    with pytest.raises(clocks.Refused, match="cannot lock card 0's SM clock: the card does not"):
        with lock(nv):
            pass
    assert set_and_reset(nv.calls) == [("nvmlDeviceSetGpuLockedClocks", 0, 1980, 1980)]


def test_only_the_cards_cuda_sees_are_locked():
    nv = FakeNvml(cards=2)
    with lock(nv, visible="GPU-h200-1") as held:
        assert [card.index for card in held.cards] == [1]
    assert {call[1] for call in set_and_reset(nv.calls)} == {1}


@pytest.mark.parametrize(
    "visible, said",
    [("", "leaves no NVIDIA card"), ("MIG-4f0c", "names a MIG instance (MIG-4f0c)")],
)
def test_no_visible_card_or_a_mig_slice_is_refused_before_any_lock(visible, said):
    nv = FakeNvml()
    with pytest.raises(clocks.Refused, match=re.escape(said)):
        with lock(nv, visible=visible):
            pass
    assert set_and_reset(nv.calls) == []


def test_without_nvml_the_refusal_says_why():
    with pytest.raises(clocks.Refused, match=r"no NVIDIA GPU whose clocks NVML can lock \(nope\)"):
        with clocks.locked("max", visible=None, open_session=no_nvml):
            pass


@contextlib.contextmanager
def no_nvml():
    """What nvml.session yields where there is no library, driver or card."""
    yield nvml.Nvml(why="nope")


def test_a_reset_nvml_refuses_leaves_restored_false_with_the_reason():
    nv = FakeNvml(fail={("nvmlDeviceResetGpuLockedClocks", 0): NO_PERMISSION})
    with lock(nv) as held:
        pass
    assert not held.restored
    assert held.problems == ["card 0 SM clock: NVMLError_NoPermission: Insufficient Permissions"]
    assert ("nvmlDeviceResetMemoryLockedClocks", 0) in nv.calls  # tried all the same


def test_a_card_with_a_real_nvml_handle_gives_its_fields():
    """NVML's handle is a ctypes pointer, which cannot be deep-copied: the record's fields
    leave it out without copying it (the first lock on a real H200 ended in a traceback)."""
    import ctypes

    from dew.telemetry.clocks import Lock, LockedCard

    handle = ctypes.pointer(ctypes.c_int(0))
    card = LockedCard(0, handle, uuid="GPU-1", sm_clock_mhz=1980, sm_clock_read_mhz=1980)
    fields = Lock("max", [card]).fields()
    assert fields["cards"][0]["uuid"] == "GPU-1" and "handle" not in fields["cards"][0]
