"""Compose the project's real configs, as train.py and eval.py do (generated options included)."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir

from resnet.config import register_configs

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def compose_config(name: str, *overrides: str, hydra: bool = False):
    """``configs/<name>.yaml`` with ``overrides``; ``hydra``: keep the ``hydra`` node."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(config_name=name, overrides=list(overrides), return_hydra_config=hydra)
