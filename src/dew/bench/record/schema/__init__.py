"""The results schema: one validated JSON document per benchmark run.

Public names (other modules build records with these):
    SCHEMA_VERSION   the version this code writes and the newest it reads
    BenchmarkRun     one run: kind ("step" | "data"), created, command, settings,
                     environment, idle_check, rows
    Settings         what ran (preset, cases, steps, warmup, dtype, mesh, loader settings)
    Environment      where and on what it ran (Host, Devices, Container, Code, packages,
                     env_flags, jax_config, processes, gpus: GpuInfo per NVIDIA card,
                     scheduler: a SlurmJob or a KubernetesPod)
    IdleCheck        the idle-host readings taken before measuring (ProcessReading, GpuReading)
    StepRow          one step-benchmark row, fields named after the table's columns
                     (gpu: GpuTelemetry, a GpuWindow per card)
    DataRow          one loader-benchmark row
    read_run(path)   load and validate a record
    write_run(path, run)   validate, then write atomically (dew.bench.common.files.atomic_write)
    ENV_FLAG_PREFIXES      the only environment variables a record may carry

Imports pydantic and the standard library only, so a record validates anywhere. The models
live in base.py, environment.py and rows.py; this module is the one to import.
`python -m dew.bench.record.schema --export results/schema` writes the JSON Schema files.
"""

from __future__ import annotations

import json
import os
import re
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any

import pydantic
from pydantic import Field

from dew import platforms  # plain data, standard library only
from dew.bench.common.files import atomic_write  # standard library only
from dew.bench.record.schema.base import (
    ENV_FLAG_PREFIXES,
    EXCLUDED_FLAG_PREFIXES,
    SECRET_NAME_PATTERN,
    JsonScalar,
    NonNegFloat,
    NonNegInt,
    Record,
    is_recordable_env_flag,
)
from dew.bench.record.schema.environment import (
    Backend,
    Code,
    Container,
    Devices,
    Environment,
    GpuInfo,
    GpuReading,
    Host,
    IdleCheck,
    KubernetesPod,
    PackageSource,
    ProcessInfo,
    ProcessReading,
    Scheduler,
    SlurmJob,
)
from dew.bench.record.schema.row_models import (
    ROW_MODELS,
    KindName,
    RowBase,
    Rows,
    register_rows,
    row_kind,
    unregister_rows,
)
from dew.bench.record.schema.rows import (
    PHASES,
    DataRepeat,
    DataRow,
    Fingerprint,
    GpuTelemetry,
    GpuWindow,
    Interval,
    Phase,
    StepRepeat,
    StepRow,
)

__all__ = [
    "ENV_FLAG_PREFIXES", "EXCLUDED_FLAG_PREFIXES", "SCHEMA_VERSION", "SECRET_NAME_PATTERN",
    "Backend", "BenchmarkRun", "Code", "Container", "DataRepeat", "DataRow", "Devices",
    "Environment",
    "Fingerprint", "GpuInfo", "GpuReading", "GpuTelemetry", "GpuWindow", "Host", "IdleCheck",
    "Interval", "JsonScalar", "KubernetesPod", "NonNegFloat", "NonNegInt", "PHASES", "Phase",
    "PackageSource",
    "KindName", "ProcessInfo", "ProcessReading", "ROW_MODELS", "Record", "RowBase", "Rows",
    "Scheduler", "Settings", "SlurmJob", "StepRepeat", "StepRow", "dump_run", "export",
    "is_recordable_env_flag", "json_schemas", "read_run", "register_rows", "row_kind",
    "unregister_rows", "write_run",
]  # fmt: skip

# 2: raw samples (`repeats`: per-step synced times, per-batch intervals), `ms_per_step_ci95`,
# `warnings` and Settings.repeats. Version 1 records (the published ones) still validate:
# every new field is optional, so they read as rows holding summaries only.
# 3: a step repeat's `phases` (where its process's time went, with wall-clock starts) and
# every repeat's `host_probe_ms` (the host-speed probe of its round). Optional again.
# 4: the devices as the process that held them read them (`devices.read_by`, TPU `coords`
# and `topology`), the `backend` it saw, a step repeat's `peak_own`. Optional again.
SCHEMA_VERSION = 4
# A row's gpu note off an NVIDIA GPU, the platform its case's process ran on after it
# (dew.bench.sweep.case_run.gpu_window writes it; a guessed record is held to it).
GPU_NOTE = "no NVIDIA GPU: platform "

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


# --- the run -----------------------------------------------------------------------------


class BenchmarkRun(Record):
    schema_version: int
    kind: KindName
    created: datetime | date | None = Field(
        description="when the run started; a date when only that is known, null when unknown"
    )
    command: str | None
    settings: Settings
    environment: Environment
    idle_check: IdleCheck | None
    rows: Rows
    source: str | None = Field(default=None, description="where a published record comes from")
    note: str | None = None
    partial: str | None = Field(
        default=None,
        description="set while the run had not reached its end when this was written (a stop "
        "signal, a crash, a process lost): how far it got; null: every case it was asked for ran",
    )

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
        expected = ROW_MODELS[self.kind]
        for index, row in enumerate(self.rows):
            if not isinstance(row, expected):
                raise ValueError(f"rows[{index}] is a {row_kind(row)} row in a {self.kind!r} run")
        return self

    @pydantic.model_validator(mode="after")
    def _no_guessed_devices_under_other_rows(self) -> BenchmarkRun:
        """A record from before its devices were read by the process that held them
        (read_by null) could guess the host (cpu) where its rows ran on a TPU: its cases'
        processes said where in each row's gpu note ("no NVIDIA GPU: platform tpu"). Its
        devices' kind and count are not known: refused."""
        devices = self.environment.devices if self.environment else None
        if devices is None or devices.read_by is not None:
            return self
        if not platforms.get(devices.platform).host_cores:  # a guess of cards, not the host
            return self
        for index, row in enumerate(self.rows):
            note = getattr(getattr(row, "gpu", None), "note", None) or ""
            ran = note.rpartition(GPU_NOTE)[2] if GPU_NOTE in note else devices.platform
            if ran != devices.platform:
                raise ValueError(
                    f"rows[{index}] ran on platform {ran} but the devices say "
                    f"{devices.platform} (read before dew asked the process that held them): "
                    "its devices are unknown; measure again"
                )
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


def foreign_files(directory: str | os.PathLike) -> list[Path]:
    """The files in `directory` an export would replace that are not an earlier export of
    the same schema (a JSON object with "$schema" and the same title): someone else's."""
    foreign = []
    for name, text in json_schemas().items():
        path = Path(directory) / name
        if not path.exists() and not path.is_symlink():
            continue
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = None
        title = json.loads(text)["title"]
        if not (isinstance(old, dict) and "$schema" in old and old.get("title") == title):
            foreign.append(path)
    return foreign


def export(directory: str | os.PathLike) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in json_schemas().items():
        written.append(atomic_write(directory / name, text))
    return written
