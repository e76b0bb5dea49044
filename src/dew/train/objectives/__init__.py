"""Losses only: each objective turns (model, batch, rng) into a scalar loss."""
