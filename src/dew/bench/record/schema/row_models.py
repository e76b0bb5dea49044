"""Which row model each kind of record holds: `ROW_MODELS` (kind -> model) and
`register_rows` (`unregister_rows`), so that a new benchmark kind's rows validate without
a branch here.

A row model derives from `RowBase` and declares its identity first: the first field
(`architecture`, `dataset`) is the one only its rows have, and tells a raw row's kind
apart from the others'; `key()` and `label()` name a row as compare and the tables do.
A record's rows are validated as the union of every registered model (a row that is
none of them says which field each needs), then held to its own kind's
(BenchmarkRun's check). pydantic and the standard library only.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Union

import pydantic
from pydantic import Discriminator, Tag
from pydantic_core import PydanticCustomError, core_schema

from dew.bench.record.schema.base import Record
from dew.bench.record.schema.rows import DataRow, StepRow, _Row

RowBase = _Row  # status matches error; a kind's row model derives from it

ROW_MODELS: dict[str, type[Record]] = {"step": StepRow, "data": DataRow}


def register_rows(kind: str, model: type[Record]) -> None:
    """Records of `kind` hold rows of `model` (its first field is its identity)."""
    if identity(model) in (identity(m) for k, m in ROW_MODELS.items() if k != kind):
        raise ValueError(f"{model.__name__}'s first field {identity(model)!r} is another "
                         "kind's identity: a raw row's kind could not be told")  # fmt: skip
    ROW_MODELS[kind] = model
    _rows_adapter.cache_clear()


def unregister_rows(kind: str) -> None:
    """Records of `kind` no longer validate (a kind registered for a while: a test's)."""
    ROW_MODELS.pop(kind, None)
    _rows_adapter.cache_clear()


def identity(model: type[Record]) -> str:
    """The field only this model's rows have: its first."""
    return next(iter(model.model_fields))


def row_kind(row: Any) -> str | None:
    """Which kind's row a row is: a model's instance, or a raw row by its identity field."""
    for kind, model in ROW_MODELS.items():
        if isinstance(row, model):
            return kind
    if isinstance(row, dict):
        for kind, model in ROW_MODELS.items():
            if identity(model) in row:
                return kind
    return None


@functools.cache
def _rows_adapter() -> pydantic.TypeAdapter:
    needs = [f"'{identity(model)}' ({kind} row)" for kind, model in ROW_MODELS.items()]
    message = "a row needs " + ", ".join(needs[:-1]) + " or " + needs[-1]
    choices = tuple(Annotated[model, Tag(kind)] for kind, model in ROW_MODELS.items())
    row = Annotated[
        Union[choices],  # noqa: UP007 (a union of a tuple built at run time)
        Discriminator(row_kind, custom_error_type="row_kind", custom_error_message=message),
    ]
    return pydantic.TypeAdapter(list[row])


class _RowsOfRegisteredKinds:
    """A record's `rows`: validated (and described in the JSON Schema) as a list of the
    union of the models registered when it is used, not when BenchmarkRun was defined."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        # a list first (its serialization: each row as what it is), then the rows' models
        return core_schema.no_info_after_validator_function(
            lambda rows: _rows_adapter().validate_python(rows), handler(source)
        )

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> dict:
        return handler(_rows_adapter().core_schema)


Rows = Annotated[list[Any], _RowsOfRegisteredKinds]


def _registered(value: Any) -> str:
    if isinstance(value, str) and value in ROW_MODELS:
        return value
    known = [repr(kind) for kind in ROW_MODELS]
    raise PydanticCustomError(
        "literal_error", "Input should be {expected}",
        {"expected": ", ".join(known[:-1]) + " or " + known[-1]},
    )  # fmt: skip


class _RegisteredKind:
    """A record's `kind`: a name in ROW_MODELS when it is validated."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(_registered)

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: Any) -> dict:
        return {"enum": list(ROW_MODELS), "type": "string"}


KindName = Annotated[str, _RegisteredKind]
