"""The fingerprint of a compiled step (dew.telemetry.fingerprint): what it keeps and drops.

GPU HLO is tested on a small snippet written by hand here (HAND_WRITTEN_GPU_HLO) in the
format XLA's GPU backend prints: the stack-frame tables, metadata, a cuBLAS gemm whose
backend config holds the autotuner's algorithm, a Triton gemm fusion with its tile config,
and `reification_cost`. XLA's own HLO parser reads it, so it is well formed. CPU is tested
on real compiles in two fresh processes with their source in two places.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dew.telemetry.fingerprint import FingerprintError, canonical_config, fingerprint, normalize

FIXTURES = Path(__file__).parent / "fixtures"

# Hand-written, not recorded: a bf16 gemm by cuBLAS (algorithm 11 chosen by the autotuner)
# and a Triton gemm fusion (128x64x32 tiles), as XLA's GPU backend prints them.
HAND_WRITTEN_GPU_HLO = """\
HloModule jit_step, is_scheduled=true, entry_computation_layout={(bf16[128,256]{1,0}, bf16[256,512]{1,0}, bf16[512,64]{1,0})->bf16[128,64]{1,0}}

FileNames
1 "/home/a/dew/src/dew/models/layers/mlp.py"

FunctionNames
1 "__call__"

FileLocations
1 {file_name_id=1 function_name_id=1 line=41 end_line=41 column=11 end_column=38}

StackFrames
1 {file_location_id=1 parent_frame_id=1}


%triton_gemm_computation (p0: bf16[128,512], p1: bf16[512,64]) -> bf16[128,64] {
  %p0 = bf16[128,512]{1,0} parameter(0)
  %p1 = bf16[512,64]{1,0} parameter(1)
  ROOT %dot.2 = bf16[128,64]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(step)/dot_general" stack_frame_id=1}
}

ENTRY %main.7 (x.1: bf16[128,256], w.1: bf16[256,512], v.1: bf16[512,64]) -> bf16[128,64] {
  %x.1 = bf16[128,256]{1,0} parameter(0)
  %w.1 = bf16[256,512]{1,0} parameter(1)
  %cublas-gemm.1 = (bf16[128,512]{1,0}, s8[4194304]{0}) custom-call(%x.1, %w.1), custom_call_target="__cublas$gemm", metadata={op_name="jit(step)/dot_general" stack_frame_id=1}, backend_config={"operation_queue_id":"0","wait_on_operation_queues":[],"gemm_backend_config":{"alpha_real":1,"alpha_imag":0,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"precision_config":{"operand_precision":["DEFAULT","DEFAULT"],"algorithm":"ALG_UNSET"},"epilogue":"DEFAULT","lhs_stride":"32768","rhs_stride":"131072","grad_x":false,"grad_y":false,"damax_output":false,"selected_algorithm":"11"},"force_earliest_schedule":false,"reification_cost":[]}
  %get-tuple-element.1 = bf16[128,512]{1,0} get-tuple-element(%cublas-gemm.1), index=0
  %v.1 = bf16[512,64]{1,0} parameter(2)
  ROOT %triton_gemm.1 = bf16[128,64]{1,0} fusion(%get-tuple-element.1, %v.1), kind=kCustom, calls=%triton_gemm_computation, metadata={op_name="jit(step)/dot_general" stack_frame_id=1}, backend_config={"operation_queue_id":"0","wait_on_operation_queues":[],"fusion_backend_config":{"kind":"__triton_gemm","triton_gemm_config":{"block_m":"128","block_n":"64","block_k":"32","split_k":"1","num_stages":"3","num_warps":"4","num_ctas":"1"}},"force_earliest_schedule":false,"reification_cost":[]}
}
"""  # noqa: E501


def variant(*replacements: tuple[str, str]) -> str:
    text = HAND_WRITTEN_GPU_HLO
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    return text


def test_the_hand_written_snippet_is_hlo_xla_reads():
    from jaxlib import _hlo

    assert _hlo.hlo_module_from_text(HAND_WRITTEN_GPU_HLO).name == "jit_step"


def test_the_program_keeps_no_source_location_and_no_backend_config():
    program, configs = normalize(HAND_WRITTEN_GPU_HLO)
    for gone in ("metadata", "stack_frame_id", "FileNames", "mlp.py", "backend_config", "jit_step"):
        assert gone not in program
    assert 'custom_call_target="__cublas$gemm"' in program and "calls=%triton_gemm" in program
    assert len(configs) == 2 and fingerprint(HAND_WRITTEN_GPU_HLO).backend_configs == 2
    gemm, triton = (json.loads(config) for config in configs)
    assert gemm["gemm_backend_config"]["selected_algorithm"] == "11"
    assert triton["fusion_backend_config"]["triton_gemm_config"]["block_n"] == "64"
    assert "reification_cost" not in gemm  # the cost model's estimate, not a choice


def test_source_locations_module_name_and_cost_estimates_do_not_change_it():
    moved = variant(
        ("/home/a/dew/src", "/srv/checkout/src"),
        ("line=41 end_line=41", "line=57 end_line=57"),
        ('op_name="jit(step)/dot_general" stack_frame_id=1}, backend_config={"operation_queue_id":"0","wait_on_operation_queues":[],"gemm',  # noqa: E501
         'op_name="jit(train)/jvp(step)/dot_general{x}\\"" source_file="/x.py" source_line=3}, backend_config={"operation_queue_id":"0","wait_on_operation_queues":[],"gemm'),  # noqa: E501
        ("HloModule jit_step", "HloModule jit_train_step"),
        ('"reification_cost":[]}\n  %get', '"reification_cost":[{"exec_time_us":12.5}]}\n  %get'),
    )  # fmt: skip
    assert moved != HAND_WRITTEN_GPU_HLO
    assert fingerprint(moved) == fingerprint(HAND_WRITTEN_GPU_HLO)


@pytest.mark.parametrize(
    "choice",
    [
        ('"selected_algorithm":"11"', '"selected_algorithm":"4"'),  # another cuBLAS algorithm
        ('"block_k":"32","split_k":"1"', '"block_k":"64","split_k":"2"'),  # other Triton tiles
        ('"num_warps":"4"', '"num_warps":"8"'),
    ],
)
def test_another_autotuning_choice_is_the_same_program_with_other_kernels(choice):
    base, other = fingerprint(HAND_WRITTEN_GPU_HLO), fingerprint(variant(choice))
    assert other.program == base.program and other.kernels != base.kernels


def test_another_dtype_is_another_program():
    f32 = variant(("bf16[128,64]{1,0} dot", "f32[128,64]{1,0} dot"))
    assert fingerprint(f32).program != fingerprint(HAND_WRITTEN_GPU_HLO).program


def test_older_xlas_quoted_backend_config_reads_as_the_same_choice():
    config = '{"fusion_backend_config":{"kind":"__triton_gemm"},"operation_queue_id":"0"}'
    quoted = json.dumps(config)  # backend_config="{\"fusion_backend_config\":...}"
    line = "  %f = f32[4]{0} fusion(%p), kind=kCustom, calls=%c, backend_config="
    _, new = normalize(line + config)
    program, old = normalize(line + quoted)
    assert old == new == [canonical_config(config)] and program.endswith("calls=%c")


def test_a_backend_config_that_never_closes_is_an_error_naming_it():
    with pytest.raises(FingerprintError, match="braces do not close"):
        fingerprint('  %f = f32[4]{0} fusion(%p), backend_config={"kind":"__triton_gemm"')


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.hlo")))
def test_every_recorded_format_fixture_loses_exactly_its_backend_configs(name):
    text = (FIXTURES / name).read_text()
    program, configs = normalize(text)
    assert len(configs) == text.count("backend_config=") > 0
    assert "backend_config" not in program and "metadata=" not in program
    assert all(isinstance(json.loads(config), dict) for config in configs)


# --- real compiles on CPU --------------------------------------------------------------------

PROGRAM = """
import json
import sys
import jax, jax.numpy as jnp
from dew.telemetry.fingerprint import compiled_fingerprint

dtype = jnp.dtype(sys.argv[1])

def step(w, x):
    def body(h, _):
        return jnp.tanh(h @ w), None
    h, _ = jax.lax.scan(body, x, None, length=3)
    return h.sum()

w = jnp.ones((64, 64), dtype)
x = jnp.ones((8, 64), dtype)
print(json.dumps(compiled_fingerprint(jax.jit(jax.grad(step)).lower(w, x).compile()).as_dict()))
"""


def compiled_in_a_fresh_process(directory: Path, dtype: str) -> dict[str, str]:
    """The fingerprint of PROGRAM compiled in a new process, its source in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "program.py"
    script.write_text(textwrap.dedent(PROGRAM))
    done = subprocess.run(
        [sys.executable, str(script), dtype], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_one_program_in_two_processes_and_two_places_is_one_fingerprint(tmp_path):
    first = compiled_in_a_fresh_process(tmp_path / "checkout-a", "bfloat16")
    second = compiled_in_a_fresh_process(tmp_path / "elsewhere" / "checkout-b", "bfloat16")
    other = compiled_in_a_fresh_process(tmp_path / "checkout-a", "float32")
    assert first == second
    assert other["program"] != first["program"]
