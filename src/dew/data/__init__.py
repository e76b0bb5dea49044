"""Datasets as plain specs, the real formats they are read from (ArrayRecord in the TFDS
layout), transforms, the CLIP tokenizer and the grain pipeline."""
