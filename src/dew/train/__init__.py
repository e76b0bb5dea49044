"""Trainer, mesh, state and objectives."""
