"""The strict base of every record model, its number types, and the environment variables
a record may carry. pydantic and the standard library only."""

from __future__ import annotations

import re
from typing import Annotated

import pydantic
from pydantic import Field

# An allowlist, not a denylist: a record carries these variables and nothing else, so a
# token or password in the environment can never reach a published file.
ENV_FLAG_PREFIXES = ("JAX_", "XLA_", "NCCL_", "CUDA_", "TF_", "TPU_", "LIBTPU_")
# Whole names outside those prefixes: LD_PRELOAD names the cases' malloc
# (dew.bench.sweep.allocator).
ENV_FLAG_NAMES = ("LD_PRELOAD",)
# Even inside the allowed prefixes a name that looks like a credential is refused.
SECRET_NAME_PATTERN = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|(^|_)KEY($|_)", re.I)

NonNegFloat = Annotated[float, Field(ge=0)]
# A timing: a time (ms) or a rate (samples/s) a verdict takes the log of. Zero, a negative
# or a non-finite figure (JSON's Infinity, NaN) is no measurement, nor one outside
# TIMING_BOUNDS: a nanosecond to 11.6 days a step (or as many samples a second), where the
# ratios and intervals of two such figures stay finite (1e308 ms overflowed them). Refused
# when the record is read, so that validate, compare and the site refuse it alike.
TIMING_BOUNDS = (1e-6, 1e9)


def _a_timing(value: float) -> float:
    low, high = TIMING_BOUNDS
    if not low <= value <= high:
        raise ValueError(f"a timing of {value:g} cannot be a step's time (ms) nor a rate "
                         f"(samples/s): a measurement lies in [{low:g}, {high:g}]")  # fmt: skip
    return value


Timing = Annotated[
    float,
    Field(gt=0, allow_inf_nan=False,
          json_schema_extra={"minimum": TIMING_BOUNDS[0], "maximum": TIMING_BOUNDS[1]}),
    pydantic.AfterValidator(_a_timing),
]  # fmt: skip
NonNegInt = Annotated[int, Field(ge=0)]
JsonScalar = str | int | float | bool | None


# TF_ is also Terraform's prefix: its input variables (TF_VAR_*) hold arbitrary values,
# passwords included, under arbitrary names, and its CLI and token settings are not ours.
EXCLUDED_FLAG_PREFIXES = ("TF_VAR_", "TF_TOKEN_", "TF_CLI_", "TF_HTTP_", "TF_WORKSPACE")


def is_recordable_env_flag(name: str) -> bool:
    """True for the variables a record may hold (allowlisted prefix, not credential-like)."""
    return (
        (name.startswith(ENV_FLAG_PREFIXES) or name in ENV_FLAG_NAMES)
        and not name.startswith(EXCLUDED_FLAG_PREFIXES)
        and not SECRET_NAME_PATTERN.search(name)
    )


class Record(pydantic.BaseModel):
    """Strict base: an unknown field is an error, never silently dropped."""

    model_config = pydantic.ConfigDict(extra="forbid", validate_assignment=True)
