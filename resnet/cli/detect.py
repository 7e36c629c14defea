"""``resnet-detect``: which padding preset were these weights trained with?

    resnet-detect weights=outputs/<date>/<time>/last.pt             # the built-in Fashion-MNIST
    resnet-detect weights=timm:/models/model.safetensors data=imagenet data.root=/data/imagenet
    resnet-detect weights=... data.root=/data/imagenet images=2000 out=ranking.json

Reads the weights, the protocol and up to ``images`` labelled images of the evaluation split as ``eval.py``
reads them (``configs/detect.yaml``), every check that needs neither weights nor images done first; then
ranks the presets (:func:`resnet.detect.detect_padding`). Every bad value is one line saying what to type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig
from torch import nn

from ..config import ConfigError, check_run_config, config_device
from ..detect import DetectionReport, detect_padding
from ..evaluation.loader import EvalProtocol, check_root, open_eval_data
from ..evaluation.protocol import check_fit, load_once, single_crop_protocol, weights_spec
from ..evaluation.sample import read_images
from ..out_files import out_file, write_json
from ..report.rows import weights_label
from .hydra_app import hydra_command


@dataclass
class DetectionInput:
    model: nn.Module  # on the CPU, under the weights' own padding (its meta says which)
    device: torch.device  # where to run it (device=)
    protocol: EvalProtocol  # crops=1
    batches: list[tuple[torch.Tensor, torch.Tensor]]  # uint8 [N, C, crop, crop], labels [N]
    num_classes: int  # the data's (a head with one more has TF-slim's background class)
    out: Path | None  # where to write the ranking as JSON
    preset_norms: dict = field(default_factory=dict)  # a grid model's BatchNorm entries per preset


def read_inputs(cfg: DictConfig) -> DetectionInput:
    """The weights, protocol and images ``configs/detect.yaml`` asks for; prints what is read."""
    spec = weights_spec(cfg)
    out = _check_config(cfg)
    device = config_device(cfg.device)
    loaded = load_once(cfg, spec)
    meta = loaded.model.meta
    protocol = single_crop_protocol(cfg, meta, loaded.origin)
    data = open_eval_data(cfg.data, protocol, cfg.batch_size)
    if data.labels is not None:  # ImageNet-R/A score a subset of the logits, ReaL sets of labels
        raise ConfigError(
            f"data={cfg.data.name} is not scored one class per image over the weights' classes; "
            "use data=imagenet, imagenet_v2 or imagenet_sketch"
        )
    check_fit(meta, data)

    label = weights_label({"weights": spec.text, "ema": cfg.ema})
    print(
        f"{label}: a {meta.arch} declared {meta.padding_name}; scoring every preset on up to {cfg.images} "
        f"images of {cfg.data.name} (resize {protocol.resize} -> crop {protocol.crop}, {protocol.interpolation}, "
        f"{protocol.preprocessing} preprocessing)",
        flush=True,
    )
    batches, skipped = read_images(data, protocol, cfg.images, cfg.batch_size)
    if skipped:
        print(f"skipped {skipped} unreadable image(s)", flush=True)
    return DetectionInput(loaded.model, device, protocol, batches, data.num_classes, out, dict(loaded.preset_norms))


def _check_config(cfg: DictConfig) -> Path | None:
    """Every check that needs no weights and no images; returns the ``out`` path (or None)."""
    if cfg.get("padding") is not None:
        raise ConfigError("detection runs the weights under every preset itself: drop +padding=...")
    check_run_config(cfg)  # every declared key's range, the architecture, the data
    check_root(cfg.data.name, cfg.data.root)  # a wrong data.root fails before the weights load
    return None if cfg.out is None else out_file(cfg.out, ".json", "out=ranking.json")


def run(cfg: DictConfig) -> DetectionReport:
    """Detect the padding of ``cfg.weights`` on ``cfg.images`` images of ``cfg.data``
    (``configs/detect.yaml``); print the ranking, and write it to ``cfg.out`` as JSON if given."""
    from data import Normalize  # imported here so that composing configs stays fast

    inputs = read_inputs(cfg)
    model, protocol = inputs.model, inputs.protocol
    normalize = Normalize(protocol.preprocessing).to(inputs.device)
    report = detect_padding(
        model.to(inputs.device),
        inputs.batches,
        normalize,
        protocol.crop,
        num_classes=inputs.num_classes,
        progress=True,
        preset_norms=inputs.preset_norms,
    )
    declared = model.meta.padding_name  # "custom" where the weights' sites match no preset
    rank = next((i for i, s in enumerate(report.scores, 1) if declared in s.presets), None)
    agrees = "no preset" if rank is None else "the best fit" if rank == 1 else f"rank {rank} of {len(report.scores)}"
    print(f"\n{report}\ndeclared by the weights: {declared}, {agrees}", flush=True)
    if inputs.out is not None:
        record = {"weights": cfg.weights, "ema": bool(cfg.ema), "declared_padding": declared, "dataset": cfg.data.name}
        record |= {key: getattr(protocol, key) for key in ("resize", "crop", "interpolation", "preprocessing")}
        write_json(inputs.out, record | report.as_dict())
        print(f"ranking written to {inputs.out}", flush=True)
    return report


main = hydra_command("detect", "resnet-detect", run)


if __name__ == "__main__":
    main()
