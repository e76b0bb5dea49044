"""Whole-run checks of the step benchmark, once and before any case starts.

What would otherwise fail once per case, each after a child has started and compiled, is
refused here in one line (a UsageError, exit 2): an output that cannot be written, XLA
flags the backend does not accept, a mesh larger than the devices, an attention
implementation the platform lacks, a case whose model config is invalid. The devices are
read by one probe process, so the parent still never initialises a JAX backend; it reports
them over dew.bench.runtime.protocol, and one that has not within PROBE_S (5 min) is killed
and refused in one line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dew import platforms
from dew.bench.common.cli import UsageError, one_line
from dew.bench.runtime import chip_lock, protocol
from dew.bench.sweep import presets
from dew.bench.sweep.presets import Case
from dew.bench.sweep.settings import Options, append_xla_flags

PROBE = "from dew.bench.sweep.preflight import probe_main; probe_main()"  # the probe's code
FORCE_DEVICES = "--xla_force_host_platform_device_count"


@dataclasses.dataclass(frozen=True)
class Devices(protocol.Message):
    """What the probe reports (dew.bench.runtime.protocol): the devices, and as the record
    holds them (dew.bench.record.devices: `identity` a schema Devices, `backend` a Backend)."""

    platform: str  # the platform that claims them (dew.platforms), as the record names it
    count: int
    kind: str
    identity: dict | None = None
    backend: dict | None = None

    def for_record(self) -> tuple[Any, Any]:
        """(schema Devices, schema Backend) for capture(identity=...)."""
        from dew.bench.record.schema import Backend
        from dew.bench.record.schema import Devices as Identity

        identity = Identity.model_validate({**(self.identity or {}), "count": self.count})
        return identity, Backend.model_validate(self.backend)


def probe_main() -> None:
    """The probe's process: the devices JAX sees, read as a record holds them, to its
    parent."""
    parent = protocol.ToParent.from_environment()
    import jax

    from dew.bench.record import devices as identity

    devices = jax.devices()
    read = identity.read(devices)
    parent.send(
        Devices(
            read.platform,
            len(devices),
            devices[0].device_kind,
            read.model_dump(mode="json"),
            identity.backend(devices).model_dump(mode="json"),
        )
    )


def probe_devices(environment: dict[str, str], timeout_s: float = protocol.PROBE_S) -> Devices:
    """The devices JAX sees with this environment, from a short child process. A backend
    that does not start (an unknown XLA flag, a missing plugin) or does not within
    `timeout_s` (the probe is then killed) is a UsageError naming why."""
    with protocol.spawn(
        "the device probe", [sys.executable, "-c", PROBE], env=environment
    ) as probe:
        try:
            return probe.receive(
                Devices, phase="starting JAX", deadline=timeout_s, waiting_for="its devices"
            )
        except protocol.ChildTimedOut:
            raise UsageError(f"JAX did not start within {timeout_s:.0f} s") from None
        except protocol.ChildFailed as error:
            output = Path(probe.log).read_text(errors="replace")
            held = chip_lock.held_line(output)
            if held:  # a TPU another process holds: say which
                raise UsageError(held) from None
            why = _why(output, str(error))
            raise UsageError(f"JAX cannot start with this environment: {why}") from None


def _why(stderr: str, otherwise: str) -> str:
    """The line that says why the backend did not start (XLA's flag parser, jax's error),
    `otherwise` when the probe wrote nothing."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if "Unknown flag" in line or "unknown flag" in line:
            return line[line.find("Unknown") if "Unknown" in line else 0 :][:300]
    return lines[-1][:300] if lines else otherwise


def simulate_cpu_devices(environment: dict[str, str], count: int) -> str | None:
    """Give the cases `count` simulated CPU devices when nothing else chose a device count
    (the cpu-smoke mesh on a CPU host). Returns the flag added, or None."""
    if FORCE_DEVICES in environment.get("XLA_FLAGS", ""):
        return None
    added = f"{FORCE_DEVICES}={count}"
    append_xla_flags(environment, added)
    return added


def check_devices(options: Options, cases: Sequence[Case], devices: Devices) -> list[str]:
    """Refuse a run the devices cannot hold; return warnings for one they hold partly."""
    needed = options.mesh.get("data", 1) * options.mesh.get("fsdp", 1)
    if needed > devices.count:
        hint = ""
        if not platforms.get(devices.platform).host_cores and options.preset == "cpu-smoke":
            hint = f"; cpu-smoke runs on CPU: set JAX_PLATFORMS=cpu and XLA_FLAGS={FORCE_DEVICES}=8"
        raise UsageError(
            f"the mesh {json.dumps(options.mesh)} needs {needed} devices; this host has "
            f"{devices.count} {devices.platform} device(s){hint}"
        )
    for case in cases:
        if case.batch % needed and case.step is None:  # a step of the user's: its own layout
            raise UsageError(
                f"case {case.label()}: batch {case.batch} cannot be split over the mesh "
                f"{json.dumps(options.mesh)} ({needed} devices); use a multiple of {needed}"
            )
    impls = {case.attention_impl or options.attention_impl for case in cases}
    fused = platforms.get(devices.platform).attention
    for impl in sorted(impls & {"cudnn"} - fused):
        raise UsageError(
            f"attention_impl {impl} needs an NVIDIA GPU; the devices here are "
            f"{devices.platform}; valid here: {', '.join(['xla', 'auto', *sorted(fused)])}"
        )
    if needed < devices.count:
        return [
            f"the mesh {json.dumps(options.mesh)} uses {needed} of the {devices.count} "
            f"{devices.platform} devices; the others stay idle"
        ]
    return []


def check_cases(cases: Sequence[Case], preset: str) -> None:
    """Every case's model config builds (sizes positive, overrides known): a bad one is
    refused before the first case runs, not reported as a failed row after a compile."""
    from dew.bench.sweep.case_run import model_config

    for case in cases:
        if case.step is not None:  # a step of the user's: dew.bench.sweep.own_step.check
            continue
        try:
            model_config(case, preset)
        except ValueError as error:  # pydantic's ValidationError included
            raise UsageError(f"case {case.label()}: {one_line(error)}") from None


def prepare_environment(
    options: Options, cases: Sequence[Case], log: Callable[[str], None]
) -> tuple[Devices, list[str]]:
    """The run's environment, checked: os.environ gets the cases' XLA flags and, for the
    cpu-smoke mesh on a CPU host, its simulated devices. Returns the devices and warnings."""
    environment = dict(os.environ)
    append_xla_flags(environment, options.xla_flags)
    devices = probe_devices(environment)
    # The preset's own mesh (cpu-smoke: 8) is what a CPU host simulates; a --mesh beyond it
    # is then refused like any mesh larger than the devices.
    preset_mesh = presets.get(options.preset).mesh
    wanted = preset_mesh.get("data", 1) * preset_mesh.get("fsdp", 1)
    added = None
    if platforms.get(devices.platform).simulated_devices and devices.count < wanted:
        added = simulate_cpu_devices(environment, wanted)
        if added:
            devices = dataclasses.replace(devices, count=wanted)
    warnings = check_devices(options, cases, devices)  # before os.environ changes
    if added:
        simulate_cpu_devices(os.environ, wanted)
        log(f"{wanted} simulated CPU devices for the cases (XLA_FLAGS += {added})")
    return devices, warnings
