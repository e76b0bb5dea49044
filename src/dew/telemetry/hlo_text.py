"""Read optimized HLO text (as `Compiled.as_text()` prints it) into computations.

The FLOP counter needs only a little of each instruction: its name, result type, opcode,
operand names and a few attributes. Optimized HLO for a train step runs to many MB, so
the module is read once, line by line, with precompiled regexes; everything beyond the
name, type and opcode is parsed lazily, only for the instructions the counter asks about.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

# `  ROOT %name = TYPE opcode(`; the rest of the line is kept for later. The type is
# everything up to the first ` word(`, which no type contains (tuple types hold `f32[..]`,
# layouts `{1,0:T(8,128)}`, never ` word(`).
_INSTRUCTION = re.compile(r"\s+(ROOT\s+)?%?([^\s=]+)\s*=\s*(.*?) ([a-z][a-z0-9\-]*)\(")
# `%name (params) -> type {` or `ENTRY %name ...{` at column 0.
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([^\s(]+)\s*\(")
_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
_OPERAND_NAME = re.compile(r"%([^\s,(){}]+)")

# Attributes of an instruction that name other computations or settings (Instruction.attribute).
CALLS = re.compile(r"calls=%?([^\s,{}()]+)")
BODY = re.compile(r"body=%?([^\s,{}()]+)")
CONDITION = re.compile(r"condition=%?([^\s,{}()]+)")
DIRECTION = re.compile(r"direction=([A-Z]+)")
INDEX = re.compile(r"index=(\d+)")


class HloParseError(ValueError):
    """The HLO text is not what the counter understands; the message names the spot."""


@dataclass(frozen=True, slots=True)
class ArrayShape:
    dtype: str
    dims: tuple[int, ...]

    @property
    def elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n


def _array_shape(dtype: str, dims: str) -> ArrayShape:
    # Dynamic dimensions print as `<=N`; their bound is what the kernel is sized for.
    return ArrayShape(
        dtype, tuple(int(d.strip().lstrip("<=")) for d in dims.split(",") if d.strip())
    )


def first_array_shape(type_text: str) -> ArrayShape:
    """The array itself, or a tuple's element 0 (cuBLAS/cuDNN results: output, workspace)."""
    found = _ARRAY_SHAPE.search(type_text)
    if found is None:
        raise HloParseError(f"no array shape in type {type_text!r}")
    return _array_shape(*found.groups())


class Instruction:
    """One HLO instruction; operands and attributes are split from the line on first use."""

    __slots__ = ("name", "type_text", "opcode", "_rest", "_operands", "_attributes")

    def __init__(self, name: str, type_text: str, opcode: str, rest: str):
        self.name = name
        self.type_text = type_text
        self.opcode = opcode
        self._rest = rest
        self._operands: list[str] | None = None
        self._attributes: str | None = None

    def _split(self) -> None:
        rest = self._rest
        close = rest.find(")")
        if close >= 0 and "(" not in rest[:close]:  # the usual case: no nested parentheses
            end = close
        else:
            depth, end = 1, len(rest)
            for index, ch in enumerate(rest):
                if ch == "(":
                    depth += 1
                elif ch == ")":
                    depth -= 1
                    if depth == 0:
                        end = index
                        break
        self._operands = _operand_items(rest[:end])
        self._attributes = rest[end + 1 :]

    @property
    def operand_items(self) -> list[str]:
        """Operand texts: `%name`, or `f32[2]{0} %name` in the older inline-typed format."""
        if self._operands is None:
            self._split()
        return self._operands  # type: ignore[return-value]

    @property
    def operands(self) -> list[str]:
        names = []
        for item in self.operand_items:
            found = _OPERAND_NAME.search(item)
            names.append(found.group(1) if found else item.split()[-1])
        return names

    @property
    def attributes(self) -> str:
        if self._attributes is None:
            self._split()
        return self._attributes  # type: ignore[return-value]

    @property
    def literal(self) -> str:
        """What is between the parentheses, e.g. `5` for `constant(5)`."""
        return ",".join(self.operand_items)

    def attribute(self, pattern: re.Pattern[str]) -> str | None:
        found = pattern.search(self.attributes)
        return found.group(1) if found else None

    def backend_config(self) -> dict | None:
        """The backend_config as JSON, or None where there is none or it is not JSON.

        Some backends print non-JSON configs (CPU TopK: `{is_stable = true}`); those carry
        nothing the counter uses, so they read as None instead of failing the parse.
        """
        text = self.attributes
        start = text.find("backend_config=")
        if start < 0:
            return None
        start += len("backend_config=")
        if text.startswith('"', start):  # the older printer: an escaped JSON string
            end = _string_end(text, start)
            raw = json.loads(text[start:end])
        else:
            end = _brace_end(text, start)
            raw = text[start:end]
        try:
            config = json.loads(raw)
        except ValueError:
            return None
        return config if isinstance(config, dict) else None


def _operand_items(text: str) -> list[str]:
    if not any(ch in text for ch in "([{"):  # names only, or inline types without layouts
        return [item.strip() for item in text.split(",") if item.strip()]
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    if last:
        items.append(last)
    return items


def _brace_end(text: str, start: int) -> int:
    """Index just past the `{...}` that starts at `start`, skipping braces inside strings."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _string_end(text: str, start: int) -> int:
    escaped = False
    for i in range(start + 1, len(text)):
        ch = text[i]
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            return i + 1
    return len(text)


@dataclass(slots=True)
class Computation:
    name: str
    instructions: dict[str, Instruction] = field(default_factory=dict)
    root: str | None = None
    parameters: dict[int, str] = field(default_factory=dict)

    def shape_of(self, operand_item: str, operand_name: str) -> str:
        """The type text of an operand: inline where printed, else from this computation."""
        if "[" in operand_item:
            return operand_item
        instruction = self.instructions.get(operand_name)
        if instruction is None:
            raise HloParseError(
                f"computation %{self.name}: operand %{operand_name} is not defined in it"
            )
        return instruction.type_text


@dataclass(slots=True)
class HloModule:
    computations: dict[str, Computation]
    entry: str

    @property
    def entry_computation(self) -> Computation:
        return self.computations[self.entry]


def parse_module(text: str) -> HloModule:
    """Read every computation of an HLO module's text; the preamble tables are skipped."""
    computations: dict[str, Computation] = {}
    entry: str | None = None
    current: Computation | None = None
    instruction_match = _INSTRUCTION.match
    for line in text.splitlines():
        if current is not None:
            if line.startswith((" ", "\t")):
                found = instruction_match(line)
                if found is None:
                    continue
                is_root, name, type_text, opcode = found.groups()
                rest = line[found.end() :]
                instruction = Instruction(name, type_text, opcode, rest)
                current.instructions[name] = instruction
                if is_root:
                    current.root = name
                if opcode == "parameter":
                    current.parameters[int(rest.split(")", 1)[0])] = name
                continue
            if line.startswith("}"):
                computations[current.name] = current
                current = None
            continue
        # Outside a computation: the HloModule line, preamble tables (FileNames,
        # FunctionNames, FileLocations, StackFrames), blank lines, or a computation header.
        if line.endswith("{") and "->" in line and not line[:1].isspace():
            found = _COMPUTATION.match(line)
            if found is None:
                continue
            current = Computation(found.group(2))
            if found.group(1):
                entry = current.name
    if current is not None:
        raise HloParseError(f"computation %{current.name} is not closed by a '}}' line")
    if entry is None:
        raise HloParseError("no ENTRY computation in the HLO text")
    return HloModule(computations, entry)
