"""What the compiler chose: a fingerprint of a compiled step's optimized HLO.

Two digests of `Compiled.as_text()`, so that a difference can be said in words:

- `program`: the HLO with what names the source rather than the program taken out, and
  without its backend configs. Taken out: every `metadata={...}` (op names, source files
  and lines), the stack-frame tables before the computations (FileNames, FunctionNames,
  FileLocations, StackFrames: paths and line numbers), and the module's name (the jitted
  function's). Two processes compiling one case in two checkouts give one `program`.
- `kernels`: the backend configs taken out, in program order, each as canonical JSON
  without `reification_cost` (the cost model's estimate of a kernel, not a choice). On a
  GPU these hold the autotuner's choices (the cuBLAS algorithm, Triton tile sizes, warps
  and stages, the cuDNN plan or engine); on CPU the fusion kinds and loop partitions.

Same `program` with another `kernels`: the same program, other kernels (the autotuner
chose differently). Another `program`: another program (another dtype, model, XLA version
or flag, or a compiler choice that changes the program itself, e.g. a Triton fusion where
the other compile called cuBLAS). What the HLO does not hold is not caught: the machine
code built from it (ptxas, LLVM), a choice made at run time (cuDNN's, NCCL's), a library
that runs another kernel for the same algorithm id; docs/conventions.md says more.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re

DIGITS = 16  # hex digits kept of each sha256: 64 bits, no collision among a record's rows

# The preamble's stack-frame tables: a title line at column 0, then rows `1 "..."` or
# `1 {...}` (file paths, function names, line numbers) until a blank line.
_TABLES = frozenset({"FileNames", "FunctionNames", "FileLocations", "StackFrames"})
# `metadata={op_type="..." op_name="..." source_file="..." source_line=N}`: no nested
# braces outside its quoted strings (which may hold braces).
_METADATA = re.compile(r',?\s*metadata=\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\}')
# `backend_config={json}` (XLA today) or `backend_config="escaped json"` (older XLA).
_BACKEND_CONFIG = re.compile(r',?\s*backend_config=(?=[{"])')
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACE_OR_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|[{}]')
_MODULE_NAME = re.compile(r"^HloModule\s+[^\s,]+")
NOT_CHOICES = ("reification_cost",)  # keys of a backend config that estimate, not choose


class FingerprintError(ValueError):
    """The HLO text has a backend config or metadata whose braces do not close."""


@dataclasses.dataclass(frozen=True, slots=True)
class Fingerprint:
    program: str  # the program without its backend configs
    kernels: str  # the backend configs, in program order
    backend_configs: int  # how many there were

    def as_dict(self) -> dict[str, str]:
        """The record's fields (StepRepeat.fingerprint): plain JSON, it crosses a pipe."""
        return {"program": self.program, "kernels": self.kernels}


def fingerprint(hlo: str) -> Fingerprint:
    """The fingerprint of optimized HLO text (`Compiled.as_text()`)."""
    program, configs = normalize(hlo)
    kernels = json.dumps(configs, separators=(",", ":"))
    return Fingerprint(_digest(program), _digest(kernels), len(configs))


def normalize(hlo: str) -> tuple[str, list[str]]:
    """The program's text without source locations, module name and backend configs, and
    the backend configs in the order they appear, each canonical (`canonical_config`)."""
    lines: list[str] = []
    configs: list[str] = []
    in_table = False
    for line in hlo.splitlines():
        if in_table:
            in_table = bool(line.strip())
            continue
        if line in _TABLES:
            in_table = True
            continue
        if line.startswith("HloModule"):
            line = _MODULE_NAME.sub("HloModule", line)
        if "metadata={" in line:
            line = _METADATA.sub("", line)
        if "backend_config=" in line:
            line = _take_configs(line, configs)
        lines.append(line.rstrip())
    return "\n".join(lines), configs


def _take_configs(line: str, configs: list[str]) -> str:
    """`line` without its backend configs, each appended to `configs`."""
    kept, at = [], 0
    for found in _BACKEND_CONFIG.finditer(line):
        if found.start() < at:  # inside a config already taken (a nested string)
            continue
        start = found.end()
        end = _value_end(line, start)
        value = line[start:end]
        if value.startswith('"'):  # older XLA: the JSON as an escaped string
            value = json.loads(value)
        configs.append(canonical_config(value))
        kept.append(line[at : found.start()])
        at = end
    kept.append(line[at:])
    return "".join(kept)


def _value_end(line: str, start: int) -> int:
    """Where the value starting at `start` ends: a quoted string, or balanced braces
    (quoted strings inside may hold braces)."""
    if line[start] == '"':
        quoted = _QUOTED.match(line, start)
        if quoted is None:
            raise FingerprintError(f"an unterminated backend_config string: {line[start:][:80]}")
        return quoted.end()
    depth = 0
    for token in _BRACE_OR_STRING.finditer(line, start):
        if token.group() == "{":
            depth += 1
        elif token.group() == "}":
            depth -= 1
            if depth == 0:
                return token.end()
    raise FingerprintError(f"a backend_config whose braces do not close: {line[start:][:80]}")


def canonical_config(text: str) -> str:
    """A backend config as compact JSON with sorted keys, without NOT_CHOICES; the text as
    it is when it is no JSON object (a backend's own format)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, dict):
        value = {key: item for key, item in value.items() if key not in NOT_CHOICES}
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def compiled_fingerprint(compiled) -> Fingerprint:
    """The fingerprint of a `jax.stages.Compiled`'s optimized HLO."""
    return fingerprint(compiled.as_text())


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:DIGITS]
