"""Plain data (dicts, lists, strings, whole numbers, booleans) as block-style YAML, with the
standard library only: the noxfile writes Kubernetes manifests before any environment
exists, so PyYAML is not at hand. What it writes is the subset every YAML 1.1 and 1.2
reader reads alike: a string is left plain only when it cannot be read as anything else
(a number, a boolean, null, a date, a flow or block indicator), otherwise it is written as
a JSON string, which is also a YAML double-quoted scalar.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

# Plain scalars: a letter or slash first, then letters, digits and . _ / - only (no colon,
# no space, no #), so no reader sees a key, a comment or an indicator in them.
_PLAIN = re.compile(r"[A-Za-z/][A-Za-z0-9._/-]*")
# Words YAML 1.1 readers (PyYAML, Go's yaml.v2) take for booleans or null.
_WORDS = {"y", "yes", "n", "no", "true", "false", "on", "off", "null", "nan", "inf"}


def scalar(value: object) -> str:
    """One value as a YAML scalar."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        plain = _PLAIN.fullmatch(value) and value.lower().lstrip(".") not in _WORDS
        return value if plain else json.dumps(value)
    raise TypeError(f"no YAML scalar for {type(value).__name__} {value!r}")


def _is_collection(value: object) -> bool:
    return isinstance(value, Mapping) or (
        isinstance(value, Sequence) and not isinstance(value, str)
    )


def _lines(value: object, indent: int) -> list[str]:
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if _is_collection(item) and item:
                lines += [f"{pad}{scalar(key)}:", *_lines(item, indent + 2)]
            else:
                lines.append(f"{pad}{scalar(key)}: {_inline(item)}")
        return lines
    for item in value:  # a sequence: each item after "- ", its mapping's keys aligned
        if isinstance(item, Mapping) and item:
            first, *rest = _lines(item, indent + 2)
            lines += [f"{pad}- {first.lstrip()}", *rest]
        elif _is_collection(item) and item:
            raise TypeError("a list directly inside a list is not written")
        else:
            lines.append(f"{pad}- {_inline(item)}")
    return lines


def _inline(value: object) -> str:
    if isinstance(value, Mapping):
        return "{}"  # only an empty one is written inline
    if _is_collection(value):
        return "[]"
    return scalar(value)


def document(value: Mapping) -> str:
    """One mapping as a YAML document (no `---`), ending in a newline."""
    return "\n".join(_lines(value, 0)) + "\n"


def documents(values: Sequence[Mapping], header: Sequence[str] = ()) -> str:
    """Several mappings as one YAML stream: comment lines first, each document after `---`."""
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header)
    return comments + "".join(f"---\n{document(value)}" for value in values)
