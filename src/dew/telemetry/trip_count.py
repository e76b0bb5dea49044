"""How many times a while loop of an optimized HLO module runs, for the FLOP count.

XLA writes `known_trip_count` into a while's backend config when it knows it; otherwise
the count is inferred from the loop's counter: a compare of a tuple element against a
constant in the condition, a constant start in the caller and a constant step in the
body, looking through copies, converts and the fusions XLA wraps them in.
"""

from __future__ import annotations

from dew.telemetry import hlo_text
from dew.telemetry.hlo_text import Computation, HloModule, HloParseError, Instruction


def trip_count(module: HloModule, caller: Computation, instruction: Instruction) -> int:
    """The trip count of `instruction` (a while in `caller`); HloParseError when unknown."""
    config = instruction.backend_config() or {}
    known = config.get("known_trip_count")
    if known and "n" in known:
        return int(known["n"])
    trips = _infer_trip_count(module, caller, instruction, config.get("known_init_step") or {})
    if trips is None:
        raise HloParseError(
            f"while %{instruction.name} in %{caller.name}: no known_trip_count in its "
            "backend_config and no constant-bounded counter to infer it from; counting its "
            "body once would be wrong"
        )
    return trips


def _scalar_source(module: HloModule, computation: Computation, name: str):
    """('const', value), ('param', tuple index of parameter 0), or None, through copies."""
    seen = 0
    while seen < 32:
        seen += 1
        instruction = computation.instructions.get(name)
        if instruction is None:
            return None
        opcode = instruction.opcode
        if opcode in ("copy", "bitcast", "reshape", "convert"):
            name = instruction.operands[0]
        elif opcode == "constant":
            try:
                return ("const", int(float(instruction.literal)))
            except ValueError:
                return None
        elif opcode == "get-tuple-element":
            source = computation.instructions.get(instruction.operands[0])
            index = instruction.attribute(hlo_text.INDEX)
            if source is None or source.opcode != "parameter" or index is None:
                return None
            return ("param", int(index))
        elif opcode == "parameter":
            return ("param_self", int(instruction.literal))
        else:
            return None
    return None


def _binary_op(module: HloModule, computation: Computation, name: str, opcode: str):
    """(attributes, [sources of both operands]) of `opcode`, looking through a wrapping fusion."""
    instruction = computation.instructions.get(name)
    if instruction is None:
        return None
    if instruction.opcode == opcode:
        sources = [_scalar_source(module, computation, o) for o in instruction.operands]
        return instruction, sources
    if instruction.opcode == "fusion":
        callee = module.computations.get(instruction.attribute(hlo_text.CALLS) or "")
        if callee is None or callee.root is None:
            return None
        inner = callee.instructions[callee.root]
        if inner.opcode != opcode:
            return None
        sources = []
        for operand in inner.operands:
            source = _scalar_source(module, callee, operand)
            if source is not None and source[0] == "param_self":
                outer = instruction.operands[source[1]]
                source = _scalar_source(module, computation, outer)
            sources.append(source)
        return inner, sources
    return None


def _infer_trip_count(module, caller, instruction, known_init_step) -> int | None:
    condition = module.computations.get(instruction.attribute(hlo_text.CONDITION) or "")
    body = module.computations.get(instruction.attribute(hlo_text.BODY) or "")
    if condition is None or body is None or condition.root is None or body.root is None:
        return None
    compare = _binary_op(module, condition, condition.root, "compare")
    if compare is None:
        return None
    compare_instruction, (left, right) = compare
    direction = compare_instruction.attribute(hlo_text.DIRECTION)
    if left and right and left[0] == "const" and right[0] == "param":
        left, right = right, left
        direction = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}.get(direction, direction)
    if not (left and right and left[0] == "param" and right[0] == "const"):
        return None
    index, bound = left[1], right[1]

    init = known_init_step.get("init")
    initial = caller.instructions.get(instruction.operands[0])
    if initial is not None and initial.opcode == "tuple" and index < len(initial.operands):
        source = _scalar_source(module, caller, initial.operands[index])
        if source and source[0] == "const":
            init = source[1]
    step = known_init_step.get("step")
    root = body.instructions[body.root]
    if root.opcode == "tuple" and index < len(root.operands):
        add = _binary_op(module, body, root.operands[index], "add")
        if add is not None:
            sources = add[1]
            constants = [s[1] for s in sources if s and s[0] == "const"]
            if ("param", index) in sources and len(constants) == 1:
                step = constants[0]
    if init is None or step is None or int(step) == 0:
        return None
    init, step = int(init), int(step)
    if direction == "LT" and step > 0:
        return max(0, -(-(bound - init) // step))
    if direction == "LE" and step > 0:
        return max(0, (bound - init) // step + 1)
    if direction == "GT" and step < 0:
        return max(0, -(-(init - bound) // -step))
    if direction == "GE" and step < 0:
        return max(0, (init - bound) // -step + 1)
    if direction == "NE" and (bound - init) % step == 0 and (bound - init) // step >= 0:
        return (bound - init) // step
    return None
