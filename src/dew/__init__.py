"""dew: one compiled training step of a generative model, as a benchmark you can reproduce."""

__version__ = "0.1.0"
