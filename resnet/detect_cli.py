"""What ``python -m resnet.detect`` reads, read as ``eval.py`` reads it: weights and labelled images.

* :func:`read_inputs`: the weights (:mod:`resnet.weights`, eval.py's ``weights=`` forms),
  the protocol (:func:`resnet.evaluation.protocol.single_crop_protocol`, single centre crop) and up to
  ``images`` labelled images of the evaluation split (:mod:`resnet.evaluation.loader`),
  every check that needs neither weights nor images done first;
* :func:`out_file`, :func:`write_json`: an ``out=`` file checked before any work, written
  atomically (``python -m resnet.export`` checks its ``out=`` here too).

Every bad value is a :class:`resnet.config.ConfigError` (or a
:class:`resnet.weights.WeightsError`) whose one line says what to type instead.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig
from torch import nn
from torch.utils.data import IterableDataset

from data.dataloader import DataLoader

from .config import ConfigError, check_data_config, check_data_package
from .distributed import pick_device
from .engine.runlog import write_json as write_json_file
from .evaluation.loader import EvalData, EvalProtocol, build_eval_loader, eval_dir
from .evaluation.protocol import check_fit, single_crop_protocol, weights_spec
from .evaluation.tencrop import protocol_view
from .model import ModelMeta
from .report.progress import Progress
from .weights import load_weights
from .workers import data_workers


@dataclass
class DetectionInput:
    model: nn.Module  # on the CPU, under the weights' own padding (its meta says which)
    device: torch.device  # where to run it (device=)
    protocol: EvalProtocol  # crops=1
    batches: list[tuple[torch.Tensor, torch.Tensor]]  # uint8 [N, C, crop, crop], labels [N]
    num_classes: int  # the data's (a head with one more has TF-slim's background class)
    out: Path | None  # where to write the ranking as JSON


def read_inputs(cfg: DictConfig) -> DetectionInput:
    """The weights, protocol and images ``configs/detect.yaml`` asks for; prints what is read."""
    spec = weights_spec(cfg)
    out = _check_config(cfg)
    try:
        device = pick_device(cfg.device)
    except (ValueError, RuntimeError) as err:  # device=cuda without a GPU
        raise ConfigError(str(err)) from None
    loaded = load_weights(spec, cfg.model.arch if cfg.get("model") else None, cfg.download)
    meta = loaded.model.meta
    protocol = single_crop_protocol(cfg, meta, loaded.origin)
    try:
        data = build_eval_loader(
            cfg.data.name, cfg.data.get("root"), protocol, cfg.batch_size, data_workers(cfg.data),
            val_labels=cfg.data.get("val_labels"), devkit=cfg.data.get("devkit"),
        )
    except (FileNotFoundError, ValueError) as err:  # an empty class folder, a wnid that is none
        raise ConfigError(str(err)) from None
    _check_fit(meta, data, cfg.data.name)

    print(f"{spec.text}: a {meta.arch} declared {meta.padding_name}; scoring every preset on up to {cfg.images} "
          f"images of {cfg.data.name} (resize {protocol.resize} -> crop {protocol.crop}, {protocol.interpolation}, "
          f"{protocol.preprocessing} preprocessing)", flush=True)
    batches, skipped = read_images(data, protocol, cfg.images, cfg.batch_size)
    if skipped:
        print(f"skipped {skipped} unreadable image(s)", flush=True)
    return DetectionInput(loaded.model, device, protocol, batches, data.num_classes, out)


def read_images(
    data: EvalData, protocol: EvalProtocol, images: int, batch_size: int
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], int]:
    """At most ``images`` labelled images of ``data`` as (uint8 [N, C, crop, crop], labels)
    batches, and how many unreadable files were skipped.

    The images are spread evenly over the split (every k-th), so that a split stored class by
    class gives every class its share; tar shards are read from their start.
    """
    loader, wanted = data.loader, min(images, data.size)
    if wanted < data.size and not isinstance(loader.dataset, IterableDataset):
        step = data.size / wanted
        loader = DataLoader(loader.dataset, batch_size=batch_size, sampler=[int(i * step) for i in range(wanted)],
                            num_workers=loader.num_workers, collate_fn=loader.collate_fn)
    view = protocol_view(protocol, data.device_resize)  # crop (and resize in-memory data) as the eval loop does
    batches, skipped, taken = [], 0, 0
    with Progress(wanted, "read images", unit="img", every=max(wanted // 10, 1)) as bar:  # lines: every 10%
        for batch in loader:
            skipped += int(batch[2]) if len(batch) > 2 else 0
            labels = batch[1][: wanted - taken]
            if len(labels):
                batches.append((view(batch[0][: len(labels)], None), labels))
            taken += len(labels)
            bar.update(len(labels))
            if taken >= wanted:
                break
    return batches, skipped


def _check_config(cfg: DictConfig) -> Path | None:
    """Every check that needs no weights and no images; returns the ``out`` path (or None)."""
    if cfg.get("padding") is not None:
        raise ConfigError("detection runs the weights under every preset itself: drop +padding=...")
    for key in ("images", "batch_size"):
        if not isinstance(cfg[key], int) or cfg[key] <= 0:
            raise ConfigError(f"{key} must be a positive number, got {key}={cfg[key]} (e.g. {key}=500)")
    check_data_package()
    check_data_config(cfg.data)
    if cfg.data.name != "fashion_mnist":
        try:
            eval_dir(cfg.data.name, cfg.data.root)  # a wrong data.root fails before the weights load
        except FileNotFoundError as err:
            raise ConfigError(str(err)) from None
    return None if cfg.out is None else out_file(cfg.out, ".json", "out=ranking.json")


def _check_fit(meta: ModelMeta, data: EvalData, dataset: str) -> None:
    if data.labels is not None:  # ImageNet-R/A score a subset of the logits, ReaL sets of labels
        raise ConfigError(f"data={dataset} is not scored one class per image over the weights' classes; "
                          "use data=imagenet, imagenet_v2 or imagenet_sketch")
    check_fit(meta, data)


def out_file(value: str, suffix: str, example: str) -> Path:
    """``out=value`` as a path, checked before any work: a ``suffix`` file in a writable folder
    (made on writing if missing). ``example``: the override to suggest instead."""
    path = Path(value).expanduser()
    if path.suffix.lower() != suffix or path.is_dir():
        raise ConfigError(f"out={value} must name a {suffix} file, e.g. {example}")
    folder = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    if not folder.is_dir():
        raise ConfigError(f"out={value}: {folder} is a file, not a folder; choose another path, e.g. {example}")
    try:  # a real file, not os.access: root passes that check even where it cannot write (/proc, /sys)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as err:
        raise ConfigError(
            f"out={value}: cannot write in {folder} ({err.strerror}); choose a writable folder, e.g. {example}"
        ) from None
    return path


def write_json(path: Path, record: dict) -> None:
    """``record`` as indented JSON, to a temporary file beside ``path`` then renamed: never half a file.
    A failed write is a :class:`ConfigError` (the ranking was printed already)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_file(path, record)
    except OSError as err:  # the folder checked before the work went away, or the disk is full
        path.with_suffix(path.suffix + ".tmp").unlink(missing_ok=True)
        raise ConfigError(f"cannot write {path}: {err.strerror or err}; choose another out=...json") from None
