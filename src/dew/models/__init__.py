"""Model families (Flax NNX). Models know nothing of training, data or benchmarks."""
