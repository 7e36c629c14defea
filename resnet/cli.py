"""What every command does with an error the user can fix: one line on stderr, no traceback."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def one_line_errors(program: str) -> Iterator[None]:
    """Inside: a bad config value or data layout (:class:`resnet.config.ConfigError`) prints
    ``error: ...`` and exits with status 2; bad or missing weights (:class:`resnet.weights.WeightsError`)
    exit with ``<program>: ...``; a dead loader worker (:mod:`data.dataloader`) says what to lower.
    Anything else is a bug and keeps its traceback."""
    from .config import ConfigError
    from .weights import WeightsError

    try:
        yield
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except WeightsError as err:
        raise SystemExit(f"{program}: {err}") from None
    except RuntimeError as err:
        if "DataLoader worker" not in str(err):
            raise
        print(f"error: {err}: lower data.workers or batch_size, then run again", file=sys.stderr)
        raise SystemExit(1) from None
