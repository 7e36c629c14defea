"""The ``main`` of a command that reads a Hydra config of ``configs/`` (detect, regrid, export, seed_table)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import hydra
from omegaconf import DictConfig

from ..config import register_configs
from .errors import one_line_errors

CONFIGS = Path(__file__).resolve().parents[2] / "configs"  # absolute: found however the module is run


def hydra_command(config_name: str, program: str, run: Callable[[DictConfig], object]) -> Callable[..., None]:
    """``main(cfg=None)`` for ``configs/<config_name>.yaml``: Hydra reads the overrides from
    ``sys.argv`` (or ``cfg``, a composed config, runs as it is); an error the user can fix is one
    line naming ``program``. The config sets ``hydra.job.name`` (Hydra would take this file's)."""

    @hydra.main(config_path=str(CONFIGS), config_name=config_name, version_base="1.3")
    def _main(cfg: DictConfig) -> None:
        with one_line_errors(program):
            run(cfg)

    def main(cfg: DictConfig | None = None) -> None:
        """The command: Hydra reads the overrides from ``sys.argv`` (``cfg``: a composed config instead)."""
        register_configs()  # model=<arch> and padding=<preset>, generated from the tables
        _main(cfg)

    return main
