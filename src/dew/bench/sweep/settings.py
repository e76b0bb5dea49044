"""The step benchmark's settings, declared once.

`Options` is what every case of a run shares. The command line (dew.bench.sweep.step_command)
takes
these same fields as its flags (its `Args` extends this class), and the record's
`Settings` is derived from them (`settings_record`), so a new setting is written in one
place. Field docstrings are the flags' help.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import MutableMapping, Sequence
from typing import Any, Literal

from dew.bench.record.schema import Settings
from dew.bench.sweep.presets import Case
from dew.config import AttentionImpl, Dtype
from dew.flags import CACHE_OFF  # --compilation-cache-dir off, shared with dew.host

# What a row's figures depend on: --resume reuses a row only when all of these match.
MEASURED_WITH = ("preset", "steps", "warmup", "dtype", "mesh", "compile_only", "xla_flags")
MEASURED_WITH += ("attention_impl",)
TIMED_STEPS = 100  # the steps a case's timing deadline (TIMED_S) covers; more get more


@dataclasses.dataclass(frozen=True)
class Options:
    """Settings shared by every case of a run."""

    preset: Literal["small", "cpu-smoke"] = "small"
    """which cases to run (dew.bench.sweep.presets)"""
    steps: int = 100
    """steps in each timed window (>= 1)"""
    warmup: int = 2
    """untimed steps before the windows (>= 0)"""
    repeats: int | Literal["auto"] = 1
    """fresh processes per case (a fresh compile each), interleaved round-robin across the
    cases; the row's figures are medians over them, with a 95% interval. auto: rounds are
    added until each row's detectable change reaches --target-mde or --max-repeats"""
    target_mde: float | None = None
    """with --repeats auto: the detectable change in percent (80% power, against another
    run like this one: dew.bench.analysis.stats.Detectable) each row is measured down to"""
    max_repeats: int = 15
    """with --repeats auto: the most repeats a row gets"""
    dtype: Dtype = "bfloat16"
    """compute dtype (parameters and optimizer state stay float32)"""
    mesh: dict[str, Any] = dataclasses.field(default_factory=dict)
    """MeshSpec fields (data, fsdp, min_shard_size); default: the preset's"""
    compile_only: bool = False
    """params, GFLOP, cost_analysis GFLOP, compile s and the compiler's memory estimate only"""
    isolate: bool = True
    """each case in its own process (its own peak memory; a crash fails that row only)"""
    compile_jobs: int | None = None
    """cases compiled at once, in their own processes, before they are timed one at a time
    (dew.bench.sweep.waves); default: the CPU count on CPU, 1 on a GPU (concurrent compiles
    would autotune concurrently on the one device), on a TPU the CPU count or what the host's
    memory holds at 5 GiB a compile (dew.bench.sweep.chip: compiled without the chip)"""
    xla_flags: str | None = None
    """appended to XLA_FLAGS for the cases"""
    allocator: Literal["auto", "tcmalloc", "system"] = "auto"
    """malloc of the cases' processes (dew.bench.sweep.allocator): auto is tcmalloc on CPU where
    installed (XLA's compile frees millions of small objects), the system's otherwise"""
    compilation_cache_dir: str | None = None
    """JAX's persistent compilation cache ('off': none); a second run skips the compile"""
    attention_impl: AttentionImpl | None = None
    """attention implementation for every case that does not set its own"""
    profile_dir: str | None = None
    """write a jax.profiler trace of a few extra steps per case here"""
    log_dir: str | None = None
    """keep each case's process log (its stdout and stderr: XLA's, ptxas', cuDNN's and the
    autotuner's warnings) here as <case>-<n>.log, n its repeat; default: beside --json-out
    in <record name without .json>.logs/ (none without --json-out); 'off': none kept"""
    case_timeout: float | None = None
    """seconds each phase of a case's process may take (its compile, its timing) before it
    is killed and its row fails; default: 30 min to compile (more with more compile jobs
    than cores), 10 min per 100 steps to time (dew.bench.sweep.settings.case_deadlines)"""
    loss_may_diverge: bool = False
    """the step is known to diverge: a loss that becomes NaN or inf keeps its row (noted,
    with a warning) where it would fail it (dew.bench.sweep.divergence)"""
    gpu_check: Literal["error", "warn", "off"] = "warn"
    """NVIDIA GPUs: read clocks, temperature, power and energy in a synced window after the
    timed ones; a card that slowed itself down (thermal, hardware or power-brake slowdown)
    fails the row (error) or warns (warn); off: no readings"""

    @property
    def repeated(self) -> bool:
        """Whether a case runs in more than one process (--repeats N > 1 or auto)."""
        return self.repeats == "auto" or self.repeats > 1


def case_deadlines(options: Options) -> tuple[float, float]:
    """(compile, timing): the seconds a case's process may take in each phase before it is
    killed and its row fails (dew.bench.runtime.protocol). --case-timeout sets both;
    otherwise each is generous for any device, so that a hung case ends and a real one is
    never cut:

        compile   COMPILE_S (30 min) from the process's start until compiled and
                  initialised, times the compile jobs per core when they outnumber the
                  cores (they share them); the slowest compile recorded is 73 s (CPU,
                  cpu-smoke), 50.4 s on a GPU (RTX 4080, small): XLA compiles on the host
                  on every device, a GPU's adding its autotuning
        timing    TIMED_S (10 min) per 100 steps (the steps run three times: the dispatch,
                  synced and GPU windows), at least TIMED_S
    """
    from dew.bench.runtime import hostprobe, protocol

    if options.case_timeout is not None:
        return options.case_timeout, options.case_timeout
    shared = max(1.0, (options.compile_jobs or 1) / hostprobe.cores())
    per_steps = max(1.0, options.steps / TIMED_STEPS)
    return protocol.COMPILE_S * shared, protocol.TIMED_S * per_steps


def case_log_dir(log_dir: str | None, json_out: str | None) -> str | None:
    """Where the cases' logs are kept: --log-dir, else beside the record (`step.json`:
    `step.logs/`); None (not kept) with --log-dir off or without a record."""
    if log_dir == CACHE_OFF:
        return None
    if log_dir is None and json_out:
        name = os.path.basename(json_out)
        stem = name[: -len(".json")] if name.endswith(".json") else name
        return os.path.join(os.path.dirname(json_out), f"{stem}.logs")
    return log_dir


def compilation_cache(options: Options) -> str | None:
    """The persistent compilation cache a case compiles with (dew.train.trainer's
    `compilation_cache_dir`; None: none): --compilation-cache-dir when named; else none for
    repeats, each a fresh compile (XLA may choose differently each time), and the default
    cache for a single one."""
    from dew.train.trainer import DEFAULT_CACHE

    cache = options.compilation_cache_dir or (CACHE_OFF if options.repeated else DEFAULT_CACHE)
    return None if cache == CACHE_OFF else cache


def settings_record(options: Options, cases: Sequence[Case]) -> Settings:
    """The record's `settings`: every Options field (those without a Settings field of
    their own in `options`), the cases and what is fixed."""
    fields = dataclasses.asdict(options)
    auto = fields["repeats"] == "auto"  # options keeps "auto"; the record, the cap
    if not auto:
        del fields["repeats"], fields["target_mde"], fields["max_repeats"]
    return Settings(
        preset=fields.pop("preset"),
        architectures=sorted({case.architecture for case in cases}),
        cases=[case.model_dump(exclude_defaults=True) for case in cases],
        steps=fields.pop("steps"),
        repeats=fields["max_repeats"] if auto else options.repeats,
        warmup=fields.pop("warmup"),
        dtype=fields.pop("dtype"),
        mesh=fields.pop("mesh"),
        optimizer="adam",
        isolate=fields.pop("isolate"),
        compile_only=fields.pop("compile_only"),
        options=fields,  # what is left: xla_flags, attention_impl, compile jobs, dirs
    )


def measured_with(settings: Settings) -> dict[str, Any]:
    """The settings a record's rows were measured with (MEASURED_WITH), by Options name."""
    flat = settings.model_dump() | (settings.options or {})
    return {name: flat.get(name) for name in MEASURED_WITH}


def append_xla_flags(environment: MutableMapping[str, str], flags: str | None) -> None:
    """Append `flags` to environment["XLA_FLAGS"] unless they are there already: the one
    place the cases' XLA flags are merged (child environments, the probe, os.environ)."""
    if flags and flags not in environment.get("XLA_FLAGS", ""):
        environment["XLA_FLAGS"] = f"{environment.get('XLA_FLAGS', '')} {flags}".strip()
