"""FLOPs of a compiled step, counted from its optimized HLO, and the utilisation they give.

Why not `compiled.cost_analysis()`: it counts a while loop's body once, and it gives
nothing for the cuBLAS/cuDNN custom calls the GPU backend moves matmuls and convolutions
into (22.5x low for the UNet, 2.58x for the decoder). The count here is executed matmul
work, per device, with the conventions of docs/conventions.md ("GFLOP/step"):

- dot and ragged-dot: 2 x result elements x contracted size.
- convolution: 2 x result elements x kernel taps x input features per group, divided by
  the product of the input (base) dilation factors. Taps over padding count; the input
  gradient of a strided convolution (a base-dilated convolution) counts its forward's figure.
- cuBLAS gemm calls from their own shapes and `gemm_backend_config` dimension numbers.
- cuDNN convolution calls: their window and dim_labels describe the forward convolution,
  whichever of forward, input gradient or filter gradient the call computes; each counts
  the forward's figure.
- cuDNN fused attention: 2 products forward, 4 backward, each 2 x B x N x T x S x D from
  `intermediate_tensor_shape` [B, N, T, S] and the head dims of Q (QK^T and its
  gradients) and V (PV and its gradients); full square, times `causal_factor` (default 1.0,
  the published convention) where the call's mask is causal.

The walk starts at ENTRY and enters every fusion (all kinds: loop, output, kCustom Triton
gemms, cuDNN fusions, the CPU `__ynn_fusion`), call, async computation, while (body and
condition times the trip count) and conditional (the most expensive branch: a step runs one
branch, and the upper bound is the honest figure for a utilisation).
"""

from __future__ import annotations

import math
import re
import weakref
from dataclasses import dataclass, field
from typing import Any

from dew.telemetry import hlo_text, ragged_work
from dew.telemetry.hlo_text import Computation, HloModule, HloParseError, Instruction
from dew.telemetry.peaks import peak_bf16_flops
from dew.telemetry.trip_count import trip_count

__all__ = [
    "FlopCount",
    "HloParseError",
    "compiled_flop_count",
    "compiled_flops",
    "cost_analysis_flops",
    "hlo_flops",
    "mfu",
]

KINDS = ("dot", "ragged_dot", "convolution", "cublas_gemm", "cudnn_conv", "cudnn_fmha")

CUBLAS_GEMM_TARGETS = frozenset({"__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8"})
# Which operand or result of each cuDNN convolution call is the forward's output and filter.
CUDNN_CONV_TARGETS = {
    "__cudnn$convForward": ("result", "operand1"),
    "__cudnn$convBiasActivationForward": ("result", "operand1"),
    "__cudnn$convForwardGraph": ("result", "operand1"),
    "__cudnn$convBackwardInput": ("operand0", "operand1"),
    "__cudnn$convBackwardFilter": ("operand1", "result"),
}
_FMHA_FORWARD = (
    "__cudnn$fmhaSoftmax",
    "__cudnn$fmhaSoftmaxDropout",
    "__cudnn$fmhaScaleBiasSoftmax",
    "__cudnn$fmhaScaleBiasSoftmaxDropout",
    "__cudnn$fmhaSoftmaxF8",
)
CUDNN_FMHA_PRODUCTS = {name: 2 for name in _FMHA_FORWARD} | {
    # JAX names the FP8 backward `...SoftmaxBackwardF8`; accept the other order too.
    **{name + "Backward": 4 for name in _FMHA_FORWARD if not name.endswith("F8")},
    "__cudnn$fmhaSoftmaxBackwardF8": 4,
    "__cudnn$fmhaSoftmaxF8Backward": 4,
}
# Custom calls that do no matmul work: counted 0 without being reported as unknown.
ZERO_FLOP_TARGETS = frozenset(
    {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "TopK", "cu_threefry2x32"}
)
CAUSAL_MASKS = frozenset({"CAUSAL", "PADDING_CAUSAL"})

_LHS_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([\d,\s]*)\}")
_WINDOW = re.compile(r"window=\{([^}]*)\}")
_DIM_LABELS = re.compile(r"dim_labels=([0-9a-z]+)_([0-9a-z]+)->([0-9a-z]+)")
_TARGET = re.compile(r'custom_call_target="([^"]*)"')
_TO_APPLY = re.compile(r"to_apply=%?([^\s,{}()]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TRUE_BRANCH = re.compile(r"true_computation=%?([^\s,{}()]+)")
_FALSE_BRANCH = re.compile(r"false_computation=%?([^\s,{}()]+)")


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one execution of a module, per device.

    `by_kind` and `op_counts` are keyed by KINDS; op counts are executions (an op in a while
    body with trip count 8 counts 8). `unknown_custom_calls` names the custom-call targets the
    counter does not know: they are counted as 0, and listed so that nothing is lost silently;
    `unknown_custom_call_counts` gives each one's executions, counted like `op_counts`.
    `work` is the work count (dew.telemetry.ragged_work), `work_unknown_custom_call_counts`
    the calls it could not count.
    """

    total: float
    by_kind: dict[str, float]
    op_counts: dict[str, int]
    unknown_custom_calls: tuple[str, ...] = ()
    unknown_custom_call_counts: dict[str, int] = field(default_factory=dict)
    work: float = 0.0
    work_unknown_custom_call_counts: dict[str, int] = field(default_factory=dict)


@dataclass
class _Tally:
    flops: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    unknown: dict[str, int] = field(default_factory=dict)  # target -> executions
    work: float = 0.0
    work_unknown: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(self.flops.values())

    def add_op(self, kind: str, flops: float, groups: int = 1) -> None:
        self.flops[kind] += flops
        self.counts[kind] += 1
        self.work += flops / groups

    def add(self, other: _Tally, times: int = 1) -> None:
        for kind in KINDS:
            self.flops[kind] += other.flops[kind] * times
            self.counts[kind] += other.counts[kind] * times
        self.work += other.work * times
        for mine, theirs in (
            (self.unknown, other.unknown),
            (self.work_unknown, other.work_unknown),
        ):
            for target, executions in theirs.items():
                mine[target] = mine.get(target, 0) + executions * times


def hlo_flops(hlo: str, *, causal_factor: float = 1.0) -> FlopCount:
    """Count the FLOPs of optimized HLO text, as `Compiled.as_text()` prints it.

    `causal_factor` scales cuDNN attention calls whose mask is causal (1.0: full square, the
    published convention; 0.5 would count only the lower triangle). Raises HloParseError where
    the text holds something the count cannot be exact about (a while loop without a known or
    inferable trip count, an operand without a shape).
    """
    module = hlo_text.parse_module(hlo)
    tally = _Counter(module, causal_factor).computation(module.entry)
    return FlopCount(
        total=tally.total,
        by_kind=dict(tally.flops),
        op_counts=dict(tally.counts),
        unknown_custom_calls=tuple(sorted(tally.unknown)),
        unknown_custom_call_counts=dict(sorted(tally.unknown.items())),
        work=tally.work,
        work_unknown_custom_call_counts=dict(sorted(tally.work_unknown.items())),
    )


# One count per executable: the Trainer's `flops` and the benchmark's row read the same
# compiled step, and its optimized HLO runs to many MB.
_COUNTS: weakref.WeakKeyDictionary[Any, FlopCount] = weakref.WeakKeyDictionary()


def compiled_flop_count(compiled) -> FlopCount:
    """The FlopCount of one call of a `jax.stages.Compiled` (per device), counted once."""
    try:
        return _COUNTS[compiled]
    except (KeyError, TypeError):  # TypeError: an object that takes no weak reference
        pass
    count = hlo_flops(compiled.as_text())
    try:
        _COUNTS[compiled] = count
    except TypeError:
        pass
    return count


def compiled_flops(compiled) -> float:
    """FLOPs per device of one call of a `jax.stages.Compiled`, from its optimized HLO."""
    return compiled_flop_count(compiled).total


def cost_analysis_flops(compiled) -> float | None:
    """XLA's own `cost_analysis()` figure (per device), or None where it gives none."""
    try:
        analysis = compiled.cost_analysis()
    except Exception:  # backends without a cost model raise rather than return None
        return None
    if isinstance(analysis, list | tuple):  # older jax returned one dict per module
        analysis = analysis[0] if analysis else None
    if not analysis or "flops" not in analysis:
        return None
    flops = float(analysis["flops"])
    return flops if flops >= 0 else None


def mfu(flops_per_step: float | None, step_seconds: float | None, device_kind: str) -> float | None:
    """Model FLOP utilisation: achieved FLOP/s over the device's dense bf16 peak.

    None where the device has no known peak (CPUs, unknown kinds) or the inputs are missing.
    """
    peak = peak_bf16_flops(device_kind)
    if peak is None or flops_per_step is None or not step_seconds or step_seconds <= 0:
        return None
    return flops_per_step / step_seconds / peak


class _Counter:
    def __init__(self, module: HloModule, causal_factor: float):
        self.module = module
        self.causal_factor = causal_factor
        self.memo: dict[str, _Tally] = {}

    def computation(self, name: str) -> _Tally:
        tally = self.memo.get(name)
        if tally is not None:
            return tally
        computation = self.module.computations.get(name)
        if computation is None:
            raise HloParseError(f"computation %{name} is called but not defined")
        tally = _Tally()
        self.memo[name] = tally  # a cycle would be malformed HLO; this stops it recursing
        for instruction in computation.instructions.values():
            opcode = instruction.opcode
            if opcode == "dot":
                tally.add_op("dot", _dot_flops(computation, instruction))
            elif opcode == "ragged-dot":
                groups = ragged_work.ragged_dot_groups(computation, instruction)
                tally.add_op("ragged_dot", _dot_flops(computation, instruction), groups)
            elif opcode == "convolution":
                groups = ragged_work.expanded_ragged_groups(self.module, computation, instruction)
                tally.add_op("convolution", _convolution_flops(computation, instruction), groups)
            elif opcode == "custom-call":
                self._custom_call(computation, instruction, tally)
            elif opcode in ("fusion", "async-start"):
                tally.add(self.computation(_required(instruction, hlo_text.CALLS, "calls")))
            elif opcode == "call":
                tally.add(self.computation(_required(instruction, _TO_APPLY, "to_apply")))
            elif opcode == "while":
                trips = trip_count(self.module, computation, instruction)
                tally.add(self.computation(_required(instruction, hlo_text.BODY, "body")), trips)
                condition = _required(instruction, hlo_text.CONDITION, "condition")
                tally.add(self.computation(condition), trips + 1)
            elif opcode == "conditional":
                branches = [self.computation(b) for b in _branch_names(instruction)]
                if branches:
                    tally.add(max(branches, key=lambda branch: branch.total))
        return tally

    def _custom_call(self, computation: Computation, instruction: Instruction, tally) -> None:
        target = instruction.attribute(_TARGET) or ""
        if target in CUBLAS_GEMM_TARGETS:
            tally.add_op("cublas_gemm", _gemm_flops(computation, instruction))
        elif target in CUDNN_CONV_TARGETS:
            tally.add_op("cudnn_conv", _cudnn_conv_flops(computation, instruction, target))
        elif target in CUDNN_FMHA_PRODUCTS:
            flops = _fmha_flops(computation, instruction, CUDNN_FMHA_PRODUCTS[target])
            mask = (instruction.backend_config() or {}).get("cudnn_fmha_backend_config", {})
            if mask.get("mask_type") in CAUSAL_MASKS:
                flops *= self.causal_factor
            tally.add_op("cudnn_fmha", flops)
        elif target not in ZERO_FLOP_TARGETS:
            tally.unknown[target] = tally.unknown.get(target, 0) + 1
            stated = ragged_work.call_flops(target, instruction)
            if stated is None:
                tally.work_unknown[target] = tally.work_unknown.get(target, 0) + 1
            else:
                tally.work += stated


def _required(instruction: Instruction, pattern: re.Pattern[str], what: str) -> str:
    value = instruction.attribute(pattern)
    if value is None:
        raise HloParseError(f"%{instruction.name} ({instruction.opcode}) has no {what}=")
    return value


def _branch_names(instruction: Instruction) -> list[str]:
    listed = instruction.attribute(_BRANCHES)
    if listed is not None:
        return [name.strip().lstrip("%") for name in listed.split(",") if name.strip()]
    return [
        name
        for name in (instruction.attribute(_TRUE_BRANCH), instruction.attribute(_FALSE_BRANCH))
        if name
    ]


def _operand_shape(computation: Computation, instruction: Instruction, index: int):
    items = instruction.operand_items
    if index >= len(items):
        raise HloParseError(
            f"%{instruction.name} ({instruction.opcode}) has no operand {index} "
            f"in computation %{computation.name}"
        )
    type_text = computation.shape_of(items[index], instruction.operands[index])
    return hlo_text.first_array_shape(type_text)


def _dims(text: str | None) -> list[int]:
    return [int(d) for d in text.split(",") if d.strip()] if text else []


def _product(values) -> int:
    return math.prod(values) if values else 1


def _dot_flops(computation: Computation, instruction: Instruction) -> float:
    result = hlo_text.first_array_shape(instruction.type_text)
    lhs = _operand_shape(computation, instruction, 0)
    contracting = _dims(instruction.attribute(_LHS_CONTRACTING))
    return 2.0 * result.elements * _product([lhs.dims[d] for d in contracting])


def _window(instruction: Instruction) -> dict[str, list[int]]:
    """`size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=2x2` -> {'size': [3, 3], 'pad': [1, 1,
    1, 1], ...} (pad: low and high of each dimension in turn)."""
    window: dict[str, list[int]] = {}
    text = instruction.attribute(_WINDOW) or ""
    for part in text.split():
        key, _, value = part.partition("=")
        if key in ("size", "stride", "lhs_dilate", "rhs_dilate"):
            window[key] = [int(v) for v in value.split("x")]
        elif key == "pad":
            window[key] = [int(v) for dim in value.split("x") for v in dim.split("_")]
    return window


def _taps_per_output(labels: re.Match, lhs, output, taps: list[int], window) -> tuple[int, int]:
    """The taps an output position counts, as (taps, the dilation they are divided by):
    over the window dimensions, each one's size divided by the input's (base) dilation, but
    one where the dimension is a matmul's free axis written as a window (seen only with the
    input's shape, `lhs`). A TPU's HLO makes such windows of a dot in two forms, both padded
    by size-1 on each side, which no ordinary convolution does: over an input extent of 1
    (`size=16 pad=15_15`), or over the axis dilated by size-1 and strided by size
    (`size=16 stride=16 pad=15_15 lhs_dilate=15`). Either way one tap of each output
    position meets the input and the rest meet padding or the dilation's holes."""
    pads, dilation = window.get("pad"), window.get("lhs_dilate") or [1] * len(taps)
    strides, spread = window.get("stride") or [1] * len(taps), window.get("rhs_dilate")
    counted, divisor = 1, 1
    for d, size in enumerate(taps):
        at, out_at = labels.group(1).find(str(d)), labels.group(3).find(str(d))
        free_axis = (
            lhs is not None and pads is not None and len(pads) == 2 * len(taps)
            and not (spread and spread[d] > 1)
            and pads[2 * d] == pads[2 * d + 1] == size - 1 > 0
            and 0 <= at < len(lhs.dims) and 0 <= out_at < len(output.dims)
            and _one_tap_each(lhs.dims[at], size, size - 1, dilation[d], strides[d],
                              output.dims[out_at])
        )  # fmt: skip
        if not free_axis:
            counted, divisor = counted * size, divisor * dilation[d]
    return counted, divisor


def _one_tap_each(extent: int, size: int, pad: int, dilation: int, stride: int, out: int) -> bool:
    """Whether each of `out` window positions holds exactly one of the `extent` input
    elements, placed `dilation` apart after `pad` of padding."""
    first = [pad + dilation * k for k in range(extent)]
    return all(
        sum(1 for place in first if stride * o <= place < stride * o + size) == 1
        for o in range(out)
    )


def _dim_labels(instruction: Instruction) -> re.Match:
    """A convolution's dim_labels: the input's, the kernel's and the output's (groups 1-3)."""
    labels = re.search(_DIM_LABELS, instruction.attributes)
    if labels is None:
        raise HloParseError(f"%{instruction.name}: convolution without dim_labels")
    return labels


def _kernel_input_features(
    instruction: Instruction, kernel_labels: str, kernel
) -> tuple[int, list[int]]:
    """Input features per group and the spatial sizes of a kernel, from its dim_labels."""
    if len(kernel_labels) != len(kernel.dims):
        raise HloParseError(
            f"%{instruction.name}: kernel labels {kernel_labels!r} do not fit shape {kernel.dims}"
        )
    features = kernel.dims[kernel_labels.index("i")]
    spatial = [
        size for label, size in zip(kernel_labels, kernel.dims, strict=True) if label.isdigit()
    ]
    return features, spatial


def _forward_convolution_flops(instruction: Instruction, output, kernel, lhs=None) -> float:
    # Input features per group: the kernel's `i` extent is already C_in / feature_group_count,
    # and for batch-grouped (filter-gradient) convolutions the contraction per output is the
    # kernel's `i` extent too, so one rule covers feature_group_count and batch_group_count.
    labels = _dim_labels(instruction)
    features, spatial = _kernel_input_features(instruction, labels.group(2), kernel)
    window = _window(instruction)
    taps = window.get("size") or spatial
    # with `lhs`, a matmul written as a convolution counts as the matmul
    counted, divisor = _taps_per_output(labels, lhs, output, taps, window)
    return 2.0 * output.elements * counted * features / divisor


def _convolution_flops(computation: Computation, instruction: Instruction) -> float:
    output = hlo_text.first_array_shape(instruction.type_text)
    lhs = _operand_shape(computation, instruction, 0)
    kernel = _operand_shape(computation, instruction, 1)
    return _forward_convolution_flops(instruction, output, kernel, lhs)


def _cudnn_conv_flops(computation: Computation, instruction: Instruction, target: str) -> float:
    output_at, kernel_at = CUDNN_CONV_TARGETS[target]

    def shape(where: str):
        if where == "result":
            return hlo_text.first_array_shape(instruction.type_text)
        return _operand_shape(computation, instruction, int(where.removeprefix("operand")))

    return _forward_convolution_flops(instruction, shape(output_at), shape(kernel_at))


def _gemm_flops(computation: Computation, instruction: Instruction) -> float:
    config = (instruction.backend_config() or {}).get("gemm_backend_config")
    if not config or "dot_dimension_numbers" not in config:
        raise HloParseError(f"%{instruction.name}: cuBLAS call without gemm_backend_config")
    contracting = [int(d) for d in config["dot_dimension_numbers"]["lhs_contracting_dimensions"]]
    result = hlo_text.first_array_shape(instruction.type_text)
    lhs = _operand_shape(computation, instruction, 0)
    return 2.0 * result.elements * _product([lhs.dims[d] for d in contracting])


def _fmha_flops(computation: Computation, instruction: Instruction, products: int) -> float:
    config = (instruction.backend_config() or {}).get("cudnn_fmha_backend_config")
    if not config or "intermediate_tensor_shape" not in config:
        raise HloParseError(f"%{instruction.name}: cuDNN attention call without its config")
    b, n, t, s = (int(d) for d in config["intermediate_tensor_shape"]["dimensions"])
    query = _operand_shape(computation, instruction, 0)
    value = _operand_shape(computation, instruction, 2)
    # Q, K, V are BTNH or BNTH: the head dim is last. bmm1's contracting dim names it too.
    bmm1 = config.get("bmm1_dot_dimension_numbers")
    if bmm1:
        query_head = _product([query.dims[int(d)] for d in bmm1["lhs_contracting_dimensions"]])
    else:
        query_head = query.dims[-1]
    value_head = value.dims[-1]
    # Half of the products contract or produce the Q/K head dim, half the V head dim.
    return 2.0 * b * n * t * s * (products // 2) * (query_head + value_head)
