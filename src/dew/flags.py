"""How a config field is written on the command line: the one spelling of a flag.

tyro turns a nested config field `data.image_size` into `--data.image-size`; dew's
messages name fields the way a user typed them. Standard library only, at the bottom of
dew, so the data specs and the benchmarks' command lines share it.
"""


def flag(field_path: str) -> str:
    """The command-line spelling of a field path: `data.image_size` -> `--data.image-size`."""
    return "--" + field_path.replace("_", "-")
