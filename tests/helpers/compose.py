"""Compose the project's real configs, as the commands do (:func:`resnet.config.compose`), and
where they are (:func:`resnet.config.config_dir`)."""

from resnet.config import compose as compose_config
from resnet.config import config_dir

CONFIGS = config_dir()

__all__ = ["CONFIGS", "compose_config"]
