"""Benchmarks, presets, the results schema and the tools over them."""
