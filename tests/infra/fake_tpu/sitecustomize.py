"""The TPU faked at its boundary for the tests of dew on a TPU host (issue 60): put this
folder on PYTHONPATH and every Python process started with it reads its devices as a TPU v5
lite with libtpu LIBTPU. Only the identity a process that opens the backend reads is
changed (dew.bench.record.devices: read, backend); the backend stays this CPU, and no
topology is named, so the step tool times its cases on the CPU."""

from dew.bench.record import devices as _devices

LIBTPU = "0.0.42.1"
_read, _backend = _devices.read, _devices.backend


def read(devices, environ=None, gpus=None):
    return _read(devices, environ, gpus).model_copy(
        update={"platform": "tpu", "kind": "TPU v5 lite"}
    )


def backend(devices, environ=None):
    return _backend(devices, environ).model_copy(update={"libtpu": LIBTPU})


_devices.read, _devices.backend = read, backend
