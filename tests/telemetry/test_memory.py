"""Memory readings: the allocator's peak (None on CPU) and the compiler's estimate."""

import jax
import jax.numpy as jnp

from dew.telemetry.memory import compiler_memory, peak_bytes_in_use


def test_cpu_allocator_reports_no_peak():
    assert peak_bytes_in_use(jax.devices("cpu")[0]) is None


def test_compiler_memory_reports_argument_output_and_peak_bytes():
    x = jax.ShapeDtypeStruct((256, 512), jnp.float32)
    compiled = jax.jit(lambda x: jnp.tanh(x @ x.T)).lower(x).compile()
    report = compiler_memory(compiled)
    assert set(report) == {
        "argument_bytes",
        "output_bytes",
        "alias_bytes",
        "temp_bytes",
        "peak_bytes",
    }
    assert report["argument_bytes"] == 256 * 512 * 4
    assert report["output_bytes"] == 256 * 256 * 4
    assert (
        report["peak_bytes"]
        >= report["argument_bytes"] + report["output_bytes"] - report["alias_bytes"]
    )


def test_donated_argument_shows_as_alias():
    x = jax.ShapeDtypeStruct((128, 128), jnp.float32)
    compiled = jax.jit(lambda x: x * 2.0, donate_argnums=0).lower(x).compile()
    assert compiler_memory(compiled)["alias_bytes"] == 128 * 128 * 4
