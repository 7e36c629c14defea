"""How a config error ends a process: one line on stderr, printed once per job, status 2.

Every command ends this way for a value it cannot use, whether Hydra found it while composing the
config (:func:`resnet.cli.hydra_app.run_main`) or a check did afterwards (:class:`resnet.config.ConfigError`).
"""

from __future__ import annotations

import sys
from typing import NoReturn

# docs/faults.md: a config error exits with status 2, under every launcher. (torchrun then adds its own
# report of a failed worker below the one line; a status of 0 would spare it, and tell a script
# or a scheduler that a run which never started had succeeded.)
CONFIG_ERROR_STATUS = 2


def launched_rank() -> int:
    """This process's rank as its launcher set it (torchrun, srun, submitit), 0 for a plain run."""
    from ..runtime.distributed import LaunchError, detect_launch

    try:
        return detect_launch().rank
    except (LaunchError, ValueError, ImportError):  # a launcher's variables half set: say it anyway
        return 0


def exit_config_error(message: str) -> NoReturn:
    """Print ``error: <message>`` on rank 0 only (every rank sees the same config) and exit with
    :data:`CONFIG_ERROR_STATUS`."""
    if launched_rank() == 0:
        print(f"error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    raise SystemExit(CONFIG_ERROR_STATUS)
