"""``resume=true`` without a run dir: the unfinished run of this config under ``outputs/``, resumed
in place of a fresh run in the new dir Hydra made up (a ``last.pt``, no ``results.json`` that holds
the configured ``epochs``, a recorded config equal on every fixed key); none or several are refused
in one line (:class:`~resnet.config.ConfigError`, status 2). docs/training.md, "Resuming", says how.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from ..command_lines import override
from ..config import ConfigError
from .ending import finished_results
from .resume_rules import Difference, as_typed, compare, flatten

if TYPE_CHECKING:
    from ..engine.train_config import TrainConfig

DEFAULT_DIR = re.compile(r"outputs/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d")  # configs/train.yaml's hydra.run.dir
SHOWN = 4  # candidates a line names


def made_up_run_dir(config: TrainConfig, run_dir: Path) -> Path | None:
    """The folder holding the run dirs (``outputs/``) where ``config`` resumes (``resume=true``) in the
    run dir Hydra made up for this invocation (a plain run, no ``hydra.run.dir=`` or ``run_dir=``);
    else None."""
    if str(config.resume).lower() != "true":
        return None
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hydra = HydraConfig.get()
    if hydra.mode != RunMode.RUN or any(o.lstrip("+~").startswith("hydra.run.dir=") for o in hydra.overrides.hydra):
        return None
    if not DEFAULT_DIR.fullmatch(str(hydra.run.dir)) or Path(hydra.runtime.output_dir).resolve() != run_dir.resolve():
        return None  # another pattern in a config file, or run_dir= given
    return run_dir.parents[1]


def pick_run_dir(config: TrainConfig, run_dir: Path) -> tuple[Path, str | None]:
    """(the run dir to use, the line that says which run it resumes): ``run_dir``, or under
    :func:`made_up_run_dir` the one unfinished run of this config beside it (module docstring)."""
    root = made_up_run_dir(config, run_dir)
    if root is None:
        return run_dir, None
    return unfinished_run(config, root, exclude=run_dir)


def unfinished_run(config: TrainConfig, root: Path, exclude: Path | None = None) -> tuple[Path, str]:
    """The one unfinished run of ``config`` in ``root/*/*/`` (not ``exclude``) and the line saying so;
    a :class:`ConfigError` naming the candidates where there is none or more than one."""
    now = config.recorded
    mine, finished, others = [], [], []
    for last in sorted(root.glob("*/*/last.pt"), key=_saved):
        folder = last.parent
        if exclude is not None and folder.resolve() == exclude.resolve():
            continue
        recorded = _recorded_config(folder)
        differs = fixed_differences(recorded, now) if recorded is not None else None
        if differs:  # unfinished by its own epochs: a run that a resume with its config would go on with
            own_epochs = recorded.get("epochs") if isinstance(recorded.get("epochs"), int) else 1
            if finished_results(folder, own_epochs) is None:
                others.append((folder, differs[0]))
        elif differs is not None:
            (mine if finished_results(folder, config.epochs) is None else finished).append(folder)
    if len(mine) == 1:
        return mine[0], (
            f"resume=true: resuming {_shown(mine[0])}, the unfinished run of this config under "
            f"{_shown(root)} ({_when(mine[0])}); hydra.run.dir=<run dir> picks another"
        )
    if mine:
        raise ConfigError(
            f"resume=true: {len(mine)} unfinished runs of this config under {_shown(root)}: pass "
            + _listed([(shlex.quote(override("hydra.run.dir", _shown(f))), _when(f)) for f in reversed(mine)], " or ")
            + " to resume one of them"
        )
    seen = []
    if finished:
        seen.append("finished: " + _listed([(_shown(f), "") for f in reversed(finished)], ", "))
    if others:
        seen.append("of other configs: " + _listed([(_shown(f), _difference(d)) for f, d in reversed(others)], ", "))
    also = f" ({'; '.join(seen)})" if seen else ""
    raise ConfigError(
        f"resume=true: no unfinished run of this config under {_shown(root)}{also}: pass "
        "hydra.run.dir=<run dir> (and its config) to resume one, or leave out resume=true to start a "
        "new run"
    )


def fixed_differences(recorded: dict, now: dict) -> list[Difference]:
    """The differences of the keys a resume keeps fixed (:func:`resnet.job.resume_rules.compare`),
    the padding's presence too: a run trained under ``+padding=`` is not one trained without it."""
    refused, _ = compare(recorded, now)
    was, given = ({k: v for k, v in flatten(c).items() if k.split(".")[0] == "padding"} for c in (recorded, now))
    if not refused and was.keys() != given.keys():
        refused.append(Difference("padding", _padding(was), _padding(given)))
    return refused


def _padding(flat: dict) -> str:
    """``symmetric``, ``stem_conv=same``, or ``(the model's own)``: a padding config in a few words."""
    chosen = {key.split(".", 1)[1]: value for key, value in flat.items() if "." in key and value is not None}
    if set(chosen) == {"preset"}:
        return str(chosen["preset"])
    return ",".join(f"{k}={v}" for k, v in chosen.items()) or "(the model's own)"


def hydra_record(folder: Path) -> DictConfig | None:
    """Hydra's record of the config the run in ``folder`` was started with (``.hydra/config.yaml``),
    unresolved; None where there is none."""
    saved = folder / ".hydra" / "config.yaml"
    return OmegaConf.load(saved) if saved.is_file() else None


def _recorded_config(folder: Path) -> dict | None:
    """The config the run in ``folder`` was started with: :func:`hydra_record` (read without the
    run dir, which only Hydra resolves), else its ``last.pt``'s; None where unreadable."""
    try:
        record = hydra_record(folder)
        if record is not None:
            config = OmegaConf.to_container(record, resolve=False)
            config.pop("run_dir", None)  # ${hydra:runtime.output_dir}: this process's, not that run's
            return OmegaConf.to_container(OmegaConf.create(config), resolve=True)
    except Exception:  # noqa: BLE001 (a YAML another version wrote: the checkpoint then)
        pass
    from ..checkpoint.training_state import TrainingState

    try:
        return TrainingState.read(folder / "last.pt").config
    except (OSError, ValueError):
        return None


def _saved(last: Path) -> float:
    try:
        return last.stat().st_mtime
    except OSError:
        return 0.0


def _when(folder: Path) -> str:
    return f"last.pt saved {time.strftime('%Y-%m-%d %H:%M', time.localtime(_saved(folder / 'last.pt')))}"


def _difference(d: Difference) -> str:
    return f"{d.key}={as_typed(d.was)}, this run has {as_typed(d.now)}"


def _listed(items: list[tuple[str, str]], joint: str) -> str:
    """``item (note)`` joined by ``joint``, the first :data:`SHOWN` (newest first), then how many more."""
    named = [f"{item} ({note})" if note else item for item, note in items[:SHOWN]]
    more = f"{joint}{len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return joint.join(named) + more


def _shown(path: Path) -> str:
    """``path`` relative to the working directory where it is below it (as the user typed outputs/), else whole."""
    relative = os.path.relpath(path)
    return path.as_posix() if relative.startswith("..") else relative
