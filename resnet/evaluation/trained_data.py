"""The data an evaluation reads when its command line names none: the data the weights were
trained on, which a ``train.py`` checkpoint records (``eval.py`` and ``resnet-cross`` alike).
Published weights record none: they were trained on ImageNet, ``eval.py``'s default ``data=imagenet``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ..command_lines import override
from ..config import ConfigError
from ..schema import schema_problems


def chose_data(overrides: Sequence[str]) -> bool:
    """Whether ``overrides`` choose the dataset (``data=``, ``+data=``, ``data@...=``); a
    ``data.<key>=`` sets a key of whichever dataset it is."""
    return any(o.lstrip("+~").partition("=")[0].split("@")[0] == "data" for o in overrides)


def recorded_data(weights: str) -> dict | None:
    """``data.name`` and ``data.root`` of the run a checkpoint file came from; None for published
    weights, a file of another format, or a checkpoint that does not say."""
    from ..checkpoint import CheckpointError, load_checkpoint

    if not Path(weights).is_file():
        return None
    try:
        data = (load_checkpoint(weights, mmap=True).get("config") or {}).get("data")  # the weights stay unread
    except CheckpointError:  # a .pth or .h5 of another framework: its loader says what it is
        return None
    return {"name": data.get("name"), "root": data.get("root")} if data and data.get("name") else None


def data_overrides(overrides: Sequence[str], datas: Sequence[Mapping]) -> list[str]:
    """The overrides that evaluate on the data ``datas`` (each a :func:`recorded_data`) were
    trained on: ``data=<name>``, and its ``data.root=`` unless ``overrides`` give one; none where
    ``overrides`` choose the dataset. Different data, or none recorded, is one line naming ``data=``."""
    if chose_data(overrides):
        return []
    trained = {(d.get("name"), d.get("root")) for d in datas}
    if len(trained) > 1:
        named = ", ".join(f"{name} ({root})" if root else str(name) for name, root in sorted(trained, key=str))
        raise ConfigError(f"the checkpoints were trained on different data ({named}): pass the data to evaluate "
                          "on, e.g. data=imagenet data.root=/data/imagenet")  # fmt: skip
    if not trained:
        raise ConfigError("no checkpoint says what data it was trained on: pass it, e.g. data=imagenet "
                          "data.root=/data/imagenet")  # fmt: skip
    ((name, root),) = trained
    user_root = any(o.lstrip("+").partition("=")[0] == "data.root" for o in overrides)
    return [f"data={name}", *([override("data.root", root)] if root and not user_root else [])]


def with_trained_data(cfg: DictConfig, typed: Sequence[str]) -> tuple[DictConfig, bool]:
    """``eval.py``'s config, composed from the overrides ``typed``: where they name no dataset, on
    the data the checkpoint was trained on (composed again with its ``data=``); True when so.
    Weights that record none keep ``data=imagenet``, and without its ``data.root`` say, in one
    line, to pass it or another ``data=``."""
    from ..config import compose
    from ..weights import WeightsError, parse_weights

    if chose_data(typed) or OmegaConf.is_missing(cfg, "weights"):
        return cfg, False
    data = recorded_data(str(cfg.weights))
    if data is not None:
        return compose("eval", *typed, *data_overrides(typed, [data])), True
    try:
        spec = parse_weights(str(cfg.weights))
    except WeightsError:
        return cfg, False  # a malformed value: the weights' own line says so, in its turn
    if (spec.path is not None and not spec.path.is_file()) or schema_problems(cfg):
        return cfg, False  # no such file: the same; a wrong value is said first, as for any other evaluation
    if OmegaConf.is_missing(cfg.data, "root"):  # eval.yaml's default dataset, ImageNet, needs its folder
        raise ConfigError(
            f"weights={cfg.weights} record no data they were trained on, so they are evaluated on "
            f"data={cfg.data.name}: pass data.root=/path/to/{cfg.data.name}, or another dataset, e.g. "
            "data=fashion_mnist or data=imagefolder data.root=/path/to/folders"
        )
    return cfg, False
