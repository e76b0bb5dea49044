"""Datasets as plain specs, the real formats they are read from (ArrayRecord, TFDS layout), transforms, the CLIP tokenizer and the grain pipeline."""
