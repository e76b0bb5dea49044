"""Units dew's figures are written in, defined once: bytes per GiB (memory_gib, peak_gib, ...).

Standard library only (nothing at all), so every layer of dew.bench may import it.
"""

GIB = 1024**3  # bytes in a gibibyte: every *_gib figure of a record is bytes / GIB
