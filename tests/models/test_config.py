"""The model-config contract (dew.config.ModelConfig): sizes must be positive, layout
fields apply only where they mean something, divisibility errors name both numbers."""

import subprocess
import sys

import pydantic
import pytest

from dew.config import ModelConfig, check_divisible
from dew.models import registry
from dew.models.decoder import CausalTransformerConfig
from dew.models.dit import DiTConfig
from dew.models.unet import UNetConfig
from dew.models.video import VideoDiTConfig

ARCHITECTURES = registry.names()
MAY_BE_ZERO = {"experts", "image_token_id"}  # 0: no experts; token id 0 is a valid id


def test_a_negative_depth_is_refused_naming_the_field():
    with pytest.raises(pydantic.ValidationError, match="depth\n.*greater than 0"):
        DiTConfig.preset("small", depth=-1)


def test_zero_heads_is_refused_before_any_division_by_it():
    with pytest.raises(pydantic.ValidationError, match="heads\n.*greater than 0"):
        CausalTransformerConfig.preset("small", heads=0)


def test_a_non_positive_entry_of_a_size_tuple_is_refused():
    with pytest.raises(pydantic.ValidationError, match=r"depths\.1"):
        UNetConfig.preset("small", depths=(64, 0, 256))


def _int_sizes(name: str):
    config_cls = registry.get(name).config_cls
    small = config_cls.preset("small")
    for field in config_cls.model_fields:
        value = getattr(small, field)
        if type(value) is int and field not in MAY_BE_ZERO:
            yield config_cls, field


SIZES = [(cls, field) for name in ARCHITECTURES for cls, field in _int_sizes(name)]


@pytest.mark.parametrize(
    ("config_cls", "field"), SIZES, ids=[f"{c.__name__}.{f}" for c, f in SIZES]
)
@pytest.mark.parametrize("value", [0, -1])
def test_every_integer_size_of_every_architecture_must_be_positive(config_cls, field, value):
    with pytest.raises(pydantic.ValidationError) as refused:
        config_cls.preset("small", **{field: value})
    # refused by the field's own bound, not by a later check that happens to trip on it
    [error] = refused.value.errors()
    assert (error["loc"], error["type"]) == ((field,), "greater_than")


def test_the_size_sweep_covers_the_usual_suspects():
    fields = {field for _, field in SIZES}
    expected = {"width", "depth", "heads", "patch", "image_size", "frames", "seq_len"}
    assert expected | {"vocab_size", "head_chunks", "top_k"} <= fields


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_every_architecture_keeps_the_contract(name):
    config_cls = registry.get(name).config_cls
    assert issubclass(config_cls, ModelConfig)
    assert {"dtype", "attention_impl", "text_width", "frames", "seq_len"} <= set(
        config_cls.model_fields
    )
    assert isinstance(config_cls.objective, str)
    config = config_cls.preset("cpu-smoke", dtype="float32", attention_impl="cudnn")
    assert (config.dtype, config.attention_impl) == ("float32", "cudnn")


def test_layout_fields_are_refused_where_they_do_not_apply():
    with pytest.raises(pydantic.ValidationError, match="frames"):
        DiTConfig.preset("small", frames=4)
    with pytest.raises(pydantic.ValidationError, match="seq_len"):
        DiTConfig.preset("small", seq_len=16)
    assert VideoDiTConfig.preset("small").frames == 8
    assert CausalTransformerConfig.preset("small").seq_len == 512
    assert DiTConfig.preset("small").frames is None


def test_unknown_dtype_and_attention_impl_are_refused():
    with pytest.raises(pydantic.ValidationError, match="dtype"):
        DiTConfig(dtype="float16")
    with pytest.raises(pydantic.ValidationError, match="attention_impl"):
        DiTConfig(attention_impl="flash")


def test_check_divisible_names_both_numbers():
    check_divisible("width", 384, "heads", 6)
    with pytest.raises(ValueError, match="^width 384 is not divisible by heads 5$"):
        check_divisible("width", 384, "heads", 5)


def test_the_config_module_does_not_import_jax():
    code = "import sys, dew.config; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
