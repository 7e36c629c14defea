"""Timing scripts, run as modules: ``python -m benchmarks.model_step``."""
