"""The results schema: one validated JSON document per benchmark run.

Public names (other modules build records with these):
    SCHEMA_VERSION   the version this code writes and the newest it reads
    BenchmarkRun     one run: kind ("step" | "data"), created, command, settings,
                     environment, idle_check, rows
    Settings         what ran (preset, cases, steps, warmup, dtype, mesh, loader settings)
    Environment      where and on what it ran (Host, Devices, Container, Code, packages,
                     env_flags, jax_config, processes)
    IdleCheck        the idle-host readings taken before measuring (ProcessReading, GpuReading)
    StepRow          one step-benchmark row, fields named after the table's columns
    DataRow          one loader-benchmark row
    read_run(path)   load and validate a record
    write_run(path, run)   validate, then write atomically (dew.bench.files.atomic_write)
    ENV_FLAG_PREFIXES      the only environment variables a record may carry

Imports pydantic and the standard library only, so a record validates anywhere.
`python -m dew.bench.schema --export results/schema` writes the JSON Schema files.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import Discriminator, Field, Tag

from dew.bench.files import atomic_write  # standard library only

# 2: raw samples (`repeats`: per-step synced times, per-batch intervals), `ms_per_step_ci95`,
# `warnings` and Settings.repeats. Version 1 records (the published ones) still validate:
# every new field is optional, so they read as rows holding summaries only.
SCHEMA_VERSION = 2

# An allowlist, not a denylist: a record carries these variables and nothing else, so a
# token or password in the environment can never reach a published file.
ENV_FLAG_PREFIXES = ("JAX_", "XLA_", "NCCL_", "CUDA_", "TF_")
# Even inside the allowed prefixes a name that looks like a credential is refused.
SECRET_NAME_PATTERN = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|(^|_)KEY($|_)", re.I)

NonNegFloat = Annotated[float, Field(ge=0)]
NonNegInt = Annotated[int, Field(ge=0)]
JsonScalar = str | int | float | bool | None


# TF_ is also Terraform's prefix: its input variables (TF_VAR_*) hold arbitrary values,
# passwords included, under arbitrary names, and its CLI and token settings are not ours.
EXCLUDED_FLAG_PREFIXES = ("TF_VAR_", "TF_TOKEN_", "TF_CLI_", "TF_HTTP_", "TF_WORKSPACE")


def is_recordable_env_flag(name: str) -> bool:
    """True for the variables a record may hold (allowlisted prefix, not credential-like)."""
    return (
        name.startswith(ENV_FLAG_PREFIXES)
        and not name.startswith(EXCLUDED_FLAG_PREFIXES)
        and not SECRET_NAME_PATTERN.search(name)
    )


class Record(pydantic.BaseModel):
    """Strict base: an unknown field is an error, never silently dropped."""

    model_config = pydantic.ConfigDict(extra="forbid", validate_assignment=True)


# --- environment -------------------------------------------------------------------------


class Host(Record):
    cpu_model: str | None
    logical_cores: NonNegInt | None
    physical_cores: NonNegInt | None
    memory_gib: NonNegFloat | None
    os: str | None = Field(description="operating system and release, e.g. 'Debian GNU/Linux 13'")
    kernel: str | None
    hostname: str | None = None


class Devices(Record):
    platform: str | None = Field(description="jax platform: cpu, gpu (cuda/rocm) or tpu")
    kind: str | None = Field(description="device kind, e.g. 'NVIDIA GeForce RTX 4080'")
    count: NonNegInt | None
    memory_gib: NonNegFloat | None = Field(description="memory of one device")


class Container(Record):
    engine: str | None = Field(description="docker or podman, with its version")
    image_id: str | None
    base_image_digest: str | None
    lock_sha256: str | None = Field(description="sha256 of the hash lock the image was built from")
    variant: str | None = None


class Code(Record):
    commit: str | None
    dirty: bool | None
    source: Literal["git", "label", "stated"] | None = Field(
        default=None,
        description="git: read from the checkout; label: from a build label or variable; "
        "stated: copied from a published text",
    )


class ProcessInfo(Record):
    """One process of a multi-process run (room for the distributed runtime)."""

    process_index: NonNegInt
    hostname: str | None = None
    local_device_count: NonNegInt | None = None


class Scheduler(Record):
    """The batch scheduler a multi-process run was started by."""

    name: Literal["slurm"]
    job_id: str
    step_id: str | None = None
    nodelist: str | None = None


class Environment(Record):
    host: Host | None
    devices: Devices | None
    driver_version: str | None
    cuda_version: str | None
    cudnn_version: str | None
    container: Container | None = Field(description="null when run on the host")
    code: Code | None
    python: str | None
    packages: dict[str, str | None] | None = Field(
        description="distribution name -> version (jax, jaxlib, the CUDA plugin, flax, ...)"
    )
    env_flags: dict[str, str] | None = Field(
        description="every JAX_*, XLA_*, NCCL_*, CUDA_*, TF_* variable that was set"
    )
    jax_config: dict[str, JsonScalar] | None = Field(
        description="JAX config values that change numerics or memory"
    )
    processes: list[ProcessInfo] | None = None
    scheduler: Scheduler | None = None

    @pydantic.field_validator("env_flags")
    @classmethod
    def _only_allowlisted_flags(cls, flags: dict[str, str] | None) -> dict[str, str] | None:
        for name in flags or {}:
            if not is_recordable_env_flag(name):
                raise ValueError(
                    f"environment variable {name!r} may not be recorded; only names starting "
                    f"with {', '.join(ENV_FLAG_PREFIXES)} that do not look like credentials"
                )
        return flags


# --- idle-host check ---------------------------------------------------------------------


class ProcessReading(Record):
    pid: NonNegInt
    name: str
    cpu_percent: NonNegFloat = Field(description="percent of one core, as psutil reports it")


class GpuReading(Record):
    index: NonNegInt
    util_percent: NonNegFloat | None
    memory_used_gib: NonNegFloat | None
    foreign_processes: list[ProcessReading] = Field(
        default_factory=list, description="compute processes on the GPU other than ours"
    )


class IdleCheck(Record):
    mode: Literal["error", "warn", "off"] | None = Field(
        description="null in a published record whose text states the host's state"
    )
    idle: bool | None = Field(description="null when the check did not run (mode off)")
    window_s: NonNegFloat | None
    cpu_percent: NonNegFloat | None = Field(description="whole host, 0-100, during the window")
    others_cpu_percent: NonNegFloat | None = Field(
        description="sum over processes other than this one and its children, in cores x 100"
    )
    logical_cores: NonNegInt | None
    load_avg_1m: NonNegFloat | None
    busiest: list[ProcessReading] = Field(default_factory=list)
    gpus: list[GpuReading] | None = None
    reasons: list[str] = Field(default_factory=list, description="why the host is not idle")
    note: str | None = None


# --- what ran ----------------------------------------------------------------------------


class Settings(Record):
    preset: str | None = None
    repeats: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="fresh processes per case, interleaved across the cases"
    )
    architectures: list[str] | None = None
    cases: list[dict[str, Any]] | None = None
    steps: Annotated[int, Field(ge=1)] | None = None
    warmup: NonNegInt | None = None
    dtype: str | None = None
    mesh: dict[str, Any] | None = None
    optimizer: str | None = None
    isolate: bool | None = None
    compile_only: bool | None = None
    loader: dict[str, Any] | None = Field(default=None, description="loader settings")
    options: dict[str, Any] | None = Field(
        default=None, description="other flags of the tool, as given"
    )


# --- rows --------------------------------------------------------------------------------


class _Row(Record):
    """Shared checks; each row declares status, error and note last, after its columns."""

    @pydantic.model_validator(mode="after")
    def _status_matches_error(self) -> _Row:
        if self.status == "failed" and not self.error:
            raise ValueError("a failed row needs its error message in 'error'")
        if self.status == "ok" and self.error:
            raise ValueError("an ok row carries no error; set status to 'failed'")
        return self


Interval = Annotated[list[NonNegFloat], Field(min_length=2, max_length=2)]


class StepRepeat(Record):
    """One fresh process of a step case (--repeats): its own compile and both windows."""

    ms_per_step: NonNegFloat = Field(description="the dispatch window's total / steps")
    synced_ms: list[NonNegFloat] = Field(description="the synced window, one time per step")
    compile_s: NonNegFloat | None = None
    host_busy: str | None = Field(
        default=None, description="why the idle check before this repeat's round failed"
    )


class DataRepeat(Record):
    """One fresh process of a loader configuration (--repeats)."""

    samples_per_s: NonNegFloat
    intervals_ms: list[NonNegFloat] = Field(description="time between batches, one per batch")
    first_batch_s: NonNegFloat | None = None
    host_busy: str | None = None


def _check_order(row: Any, names: tuple[str, ...]) -> None:
    values = [(n, getattr(row, n)) for n in names if getattr(row, n) is not None]
    for (lo_name, lo), (hi_name, hi) in zip(values, values[1:], strict=False):
        if lo > hi:
            raise ValueError(f"percentiles out of order: {lo_name}={lo} > {hi_name}={hi}")


class StepRow(_Row):
    """One architecture (one case) of the step benchmark: the table's columns."""

    architecture: str
    # Case settings that tell two rows of one architecture apart; null = preset default.
    head_chunks: Annotated[int, Field(ge=1)] | None = None
    attention_impl: str | None = None
    case: dict[str, JsonScalar] | None = Field(
        default=None, description="other case fields set for this row (e.g. MoE settings)"
    )
    sample: str | None = None
    batch: Annotated[int, Field(ge=1)] | None = None
    params: NonNegInt | None = None
    condition_params: NonNegInt | None = Field(
        default=None, description="parameters of the condition encoder, included in params"
    )
    steps: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="measured steps when this row differs from the settings"
    )
    warmup: NonNegInt | None = None
    ms_per_step: NonNegFloat | None = None
    p10_ms: NonNegFloat | None = None
    p50_ms: NonNegFloat | None = None
    p90_ms: NonNegFloat | None = None
    samples_per_s: NonNegFloat | None = None
    tokens_per_s: NonNegFloat | None = None
    gflop_per_step: NonNegFloat | None = None
    cost_analysis_gflop: NonNegFloat | None = None
    util: Annotated[float, Field(ge=0, le=1.5)] | None = None
    peak_gib: NonNegFloat | None = None
    compiler_peak_gib: NonNegFloat | None = None
    compile_s: NonNegFloat | None = None
    loss: float | None = None
    loss_finite: bool | None = None
    process_spread_ms: NonNegFloat | None = Field(
        default=None, description="slowest minus fastest process ms/step (multi-process runs)"
    )
    ms_per_step_ci95: Interval | None = Field(
        default=None, description="95% interval of the median ms/step over repeats and steps"
    )
    repeats: list[StepRepeat] | None = Field(
        default=None, description="the raw samples: every repeat's windows (schema 2)"
    )
    warnings: list[str] = Field(default_factory=list, description="noise warnings")
    status: Literal["ok", "failed"]
    error: str | None = None
    note: str | None = None

    @pydantic.model_validator(mode="after")
    def _percentiles_ordered(self) -> StepRow:
        _check_order(self, ("p10_ms", "p50_ms", "p90_ms"))
        if self.condition_params is not None and self.params is not None:
            if self.condition_params > self.params:
                raise ValueError(
                    f"condition_params={self.condition_params} exceeds params={self.params}"
                )
        if self.loss is not None and self.loss_finite is not None:
            if math.isfinite(self.loss) != self.loss_finite:
                raise ValueError(f"loss={self.loss} contradicts loss_finite={self.loss_finite}")
        return self

    # --- the identity of a case: the one place it is spelled ------------------------------

    def key(self) -> tuple:
        """What identifies this row's case: architecture, batch and the case settings.

        The batch is read from either place a record keeps it (the column, or the case
        settings of a row that failed before its figures), so a published row and a new one
        of the same case match. --resume, compare and the report all match on this."""
        case = dict(self.case or {})
        batch = self.batch if self.batch is not None else case.get("batch")
        case.pop("batch", None)
        settings = tuple(sorted(case.items(), key=lambda kv: kv[0]))
        return (self.architecture, batch, self.head_chunks, self.attention_impl, settings)

    def label(self) -> str:
        """The architecture and the settings that tell its rows apart (batch has a column):
        `causal_transformer (moe)`, `causal_transformer (head_chunks=1)`."""
        parts = []
        if self.head_chunks is not None:
            parts.append(f"head_chunks={self.head_chunks}")
        if self.attention_impl is not None:
            parts.append(f"attention_impl={self.attention_impl}")
        for name, value in sorted((self.case or {}).items()):
            if name != "batch":
                parts.append(name if value is True else f"{name}={value}")
        return self.architecture + (f" ({', '.join(parts)})" if parts else "")


class DataRow(_Row):
    """One loader configuration of the data benchmark."""

    dataset: str
    batch: Annotated[int, Field(ge=1)]
    image_size: Annotated[int, Field(ge=1)] | None = None
    workers: NonNegInt | None = None
    threads: NonNegInt | None = None
    steps: Annotated[int, Field(ge=1)] | None = None
    warmup: NonNegInt | None = None
    samples_per_s: NonNegFloat | None = None
    p50_ms: NonNegFloat | None = None
    p95_ms: NonNegFloat | None = None
    first_batch_s: NonNegFloat | None = None
    process_spread_ms: NonNegFloat | None = None
    samples_per_s_ci95: Interval | None = Field(
        default=None, description="95% interval of the median samples/s over repeats"
    )
    repeats: list[DataRepeat] | None = Field(
        default=None, description="the raw samples: every repeat's batch intervals (schema 2)"
    )
    warnings: list[str] = Field(default_factory=list, description="noise warnings")
    status: Literal["ok", "failed"]
    error: str | None = None
    note: str | None = None

    @pydantic.model_validator(mode="after")
    def _percentiles_ordered(self) -> DataRow:
        _check_order(self, ("p50_ms", "p95_ms"))
        return self

    def key(self) -> tuple:
        """What identifies this row's loader configuration."""
        return (self.dataset, self.batch, self.image_size, self.workers, self.threads)

    def label(self) -> str:
        return f"{self.dataset} (workers={self.workers}, threads={self.threads})"


def _row_kind(row: Any) -> str | None:
    """Which row model a raw row is, from the field only it has."""
    if isinstance(row, StepRow):
        return "step"
    if isinstance(row, DataRow):
        return "data"
    if isinstance(row, dict):
        if "architecture" in row:
            return "step"
        if "dataset" in row:
            return "data"
    return None


Row = Annotated[
    Annotated[StepRow, Tag("step")] | Annotated[DataRow, Tag("data")],
    Discriminator(
        _row_kind,
        custom_error_type="row_kind",
        custom_error_message="a row needs 'architecture' (step row) or 'dataset' (data row)",
    ),
]


# --- the run -----------------------------------------------------------------------------


class BenchmarkRun(Record):
    schema_version: int
    kind: Literal["step", "data"]
    created: datetime | date | None = Field(
        description="when the run started; a date when only that is known, null when unknown"
    )
    command: str | None
    settings: Settings
    environment: Environment
    idle_check: IdleCheck | None
    rows: list[Row]
    source: str | None = Field(default=None, description="where a published record comes from")
    note: str | None = None

    @pydantic.field_validator("created", mode="before")
    @classmethod
    def _date_stays_date(cls, value: Any) -> Any:
        # A published table knows its day, not its hour: keep "2026-09-02" a date rather
        # than inventing midnight.
        if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            return date.fromisoformat(value)
        return value

    @pydantic.field_validator("schema_version")
    @classmethod
    def _known_version(cls, version: int) -> int:
        if version > SCHEMA_VERSION:
            raise ValueError(
                f"schema_version {version} is newer than this dew reads ({SCHEMA_VERSION}); "
                "update dew to read this record"
            )
        if version < 1:
            raise ValueError(
                f"schema_version {version} is not a valid version (1..{SCHEMA_VERSION})"
            )
        return version

    @pydantic.model_validator(mode="after")
    def _rows_match_kind(self) -> BenchmarkRun:
        expected = StepRow if self.kind == "step" else DataRow
        for index, row in enumerate(self.rows):
            if not isinstance(row, expected):
                raise ValueError(f"rows[{index}] is a {_row_kind(row)} row in a {self.kind!r} run")
        return self


# --- reading and writing -----------------------------------------------------------------


def read_run(path: str | os.PathLike) -> BenchmarkRun:
    """Load a record; raises pydantic.ValidationError or ValueError (bad JSON)."""
    return BenchmarkRun.model_validate_json(Path(path).read_text())


def dump_run(run: BenchmarkRun) -> str:
    return run.model_dump_json(indent=2) + "\n"


def write_run(path: str | os.PathLike, run: BenchmarkRun | dict) -> BenchmarkRun:
    """Validate `run`, then write it atomically: a reader sees the old file or the new one."""
    payload = run.model_dump(mode="python") if isinstance(run, BenchmarkRun) else run
    validated = BenchmarkRun.model_validate(payload)
    atomic_write(path, dump_run(validated))
    return validated


# --- JSON Schema export ------------------------------------------------------------------

SCHEMA_FILES = {
    "benchmark_run.schema.json": BenchmarkRun,
    "step_row.schema.json": StepRow,
    "data_row.schema.json": DataRow,
    "environment.schema.json": Environment,
}


def json_schemas() -> dict[str, str]:
    """File name -> JSON Schema text, exactly as exported."""
    out = {}
    for name, model in SCHEMA_FILES.items():
        schema = model.model_json_schema()
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["x-schema-version"] = SCHEMA_VERSION
        out[name] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def export(directory: str | os.PathLike) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in json_schemas().items():
        written.append(atomic_write(directory / name, text))
    return written


@dataclasses.dataclass(frozen=True)
class ExportArgs:
    """Write the JSON Schema files of the results schema."""

    export: Path
    """the directory to write the *.schema.json files into"""


def main(argv: list[str] | None = None) -> int:
    from dew.bench import cli
    from dew.bench.files import check_output_dir

    def body() -> int:
        argv_ = sys.argv[1:] if argv is None else argv
        args = cli.parse(ExportArgs, argv_, prog="python -m dew.bench.schema")
        check_output_dir(args.export, flag="--export")
        for path in export(args.export):
            print(path)
        return 0

    return cli.run("dew.bench.schema", body)


if __name__ == "__main__":
    sys.exit(main())
