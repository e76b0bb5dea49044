"""The work count's own rules (`FlopCount.work`): a ragged dot by its groups, however the
compiler wrote it, and a Mosaic kernel's call from the cost it states.

The executed count (`FlopCount.total`) counts every product an instruction's shapes make.
Where a ragged dot (`jax.lax.ragged_dot`: each row through one group's kernel, a mixture
of experts' grouped matmul) is written over every group, most of those products meet rows
of other groups masked to zero; the work count keeps each row's product with its own group
only:

- a `ragged-dot` whose ragged dimension is contracted (the weight gradient, `[m,k] x [m,n]
  -> [g,k,n]`): each group contracts its own rows, so the executed figure divided by the
  groups (the group sizes' last dimension). The other modes already count the rows once.
- a convolution a TPU wrote for a ragged dot over every group (the groups are its window
  dimension, padded and dilated so each output position meets one group): divided by the
  groups, the extent of its output's window dimensions. Known by its metadata naming
  `ragged_dot_general`, or, where the compiler kept no metadata (libtpu 0.0.42's weight
  gradient), by an operand masked group by group: the same rows given to every group (a
  broadcast along the window dimension), each group's copy masked to its own rows by a
  `select` whose predicate spans the window and the contracted dimension.
- `tpu_custom_call` (a Mosaic kernel: Pallas's, or XLA's own, e.g. its ragged-dot kernel
  `ragged-dot-none`): the `flops` of the cost estimate in its backend config
  (`custom_call_config.cost_estimate`), where it states one; one that states none is
  named as uncounted, as every custom call the counter does not know is.

JAX's CPU lowering of a ragged dot (`_ragged_dot_general_impl`) is dense dots over
every group with the rows masked, which the optimized HLO does not tell from any other
dot: there the work count is the executed count (docs/conventions.md, "work GFLOP").
"""

from __future__ import annotations

import re

from dew.telemetry import hlo_text
from dew.telemetry.hlo_text import Computation, HloModule, HloParseError, Instruction

MOSAIC_TARGET = "tpu_custom_call"

_LHS_RAGGED = re.compile(r"lhs_ragged_dims=\{([\d,\s]*)\}")
_LHS_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([\d,\s]*)\}")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_OUTPUT_LABELS = re.compile(r"dim_labels=[0-9a-z]+_[0-9a-z]+->([0-9a-z]+)")
_OPERAND_LABELS = re.compile(r"dim_labels=([0-9a-z]+_[0-9a-z]+)->")
_BROADCAST_DIMS = re.compile(r"dimensions=\{([\d,\s]*)\}")
# How deep a chain of fusions an operand is looked through (a select inside a fusion
# inside the convolution's own fusion is two).
_FUSION_DEPTH = 4


def _dims(text: str | None) -> set[int]:
    return {int(d) for d in text.split(",") if d.strip()} if text else set()


def ragged_dot_groups(computation: Computation, instruction: Instruction) -> int:
    """What a `ragged-dot`'s executed figure is divided by: its groups where the ragged
    dimension is contracted, else 1."""
    ragged = _dims(instruction.attribute(_LHS_RAGGED))
    if not ragged & _dims(instruction.attribute(_LHS_CONTRACTING)):
        return 1
    items = instruction.operand_items
    if len(items) < 3:
        raise HloParseError(f"%{instruction.name} (ragged-dot) has no group sizes operand")
    sizes = hlo_text.first_array_shape(computation.shape_of(items[2], instruction.operands[2]))
    if not sizes.dims:
        raise HloParseError(f"%{instruction.name} (ragged-dot): group sizes without a shape")
    return sizes.dims[-1]


def expanded_ragged_groups(
    module: HloModule, computation: Computation, instruction: Instruction
) -> int:
    """What a convolution's executed figure is divided by: the groups where it is a ragged
    dot written over every group (its metadata names `ragged_dot_general`, or an operand
    is masked group by group), else 1."""
    op_name = instruction.attribute(_OP_NAME) or ""
    if op_name.rsplit("/", 1)[-1] != "ragged_dot_general" and not any(
        _masked_by_group(module, computation, instruction, at) for at in (0, 1)
    ):
        return 1
    labels = instruction.attribute(_OUTPUT_LABELS)
    if labels is None:
        return 1
    output = hlo_text.first_array_shape(instruction.type_text)
    groups = 1
    for at, label in enumerate(labels):
        if label.isdigit() and at < len(output.dims):
            groups *= output.dims[at]
    return groups


def _masked_by_group(
    module: HloModule, computation: Computation, convolution: Instruction, at: int
) -> bool:
    """Whether operand `at` of a convolution is the same rows for every group, each group's
    copy masked to its own: `select(broadcast(mask), broadcast(rows), _)`, the mask over
    the window and the contracted dimension, the rows without the window dimension."""
    labels = convolution.attribute(_OPERAND_LABELS)
    if labels is None or at >= len(convolution.operands):
        return False
    operand_labels = labels.split("_")[at]
    window = {i for i, label in enumerate(operand_labels) if label.isdigit()}
    contracted = operand_labels.find("f" if at == 0 else "i")
    if not window or contracted < 0:
        return False
    where, select = _through_fusions(module, computation, convolution.operands[at])
    if select is None or select.opcode != "select" or len(select.operands) < 2:
        return False
    _, mask = _through_fusions(module, where, select.operands[0])
    _, rows = _through_fusions(module, where, select.operands[1])
    if mask is None or rows is None or mask.opcode != "broadcast" or rows.opcode != "broadcast":
        return False
    mask_dims = _dims(mask.attribute(_BROADCAST_DIMS))
    rows_dims = _dims(rows.attribute(_BROADCAST_DIMS))
    return window | {contracted} <= mask_dims and not window & rows_dims


def _through_fusions(
    module: HloModule, computation: Computation, name: str
) -> tuple[Computation, Instruction | None]:
    """The instruction that makes `name` in `computation`, looked through fusions to the
    root of the computation each calls, with the computation it lies in."""
    instruction = computation.instructions.get(name)
    for _ in range(_FUSION_DEPTH):
        if instruction is None or instruction.opcode != "fusion":
            break
        called = module.computations.get(instruction.attribute(hlo_text.CALLS) or "")
        if called is None or called.root is None:
            return computation, None
        computation, instruction = called, called.instructions.get(called.root)
    return computation, instruction


def call_flops(target: str, instruction: Instruction) -> float | None:
    """A custom call's FLOPs for the work count: a Mosaic call's stated cost; None for any
    other call, or a Mosaic call that states none."""
    return stated_flops(instruction) if target == MOSAIC_TARGET else None


def stated_flops(instruction: Instruction) -> float | None:
    """A Mosaic call's own FLOPs, from the cost estimate in its backend config (a number,
    or an int64 written as a string, as a TPU's optimized HLO prints it); None where it
    states none."""
    config = (instruction.backend_config() or {}).get("custom_call_config")
    estimate = config.get("cost_estimate") if isinstance(config, dict) else None
    flops = estimate.get("flops") if isinstance(estimate, dict) else None
    if flops is None:
        return None
    try:
        value = float(flops)
    except (TypeError, ValueError):
        return None
    return value if value >= 0 else None
