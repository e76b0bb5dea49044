"""How a config field is written on the command line: the one spelling of a flag, and the
values a flag shares between the tools and the host's sessions.

tyro turns a nested config field `data.image_size` into `--data.image-size`; dew's
messages name fields the way a user typed them. Standard library only, at the bottom of
dew, so the data specs, the benchmarks' command lines and the host's sessions (dew.host,
which imports no pydantic) share it.
"""

CACHE_OFF = "off"  # --compilation-cache-dir off: compile every case from scratch


def flag(field_path: str) -> str:
    """The command-line spelling of a field path: `data.image_size` -> `--data.image-size`."""
    return "--" + field_path.replace("_", "-")
