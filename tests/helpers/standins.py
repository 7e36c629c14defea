"""Stand-ins for published weight files, of random values, made by walking our model: what the
seed-table recipe of docs/evaluation.md builds to show the command on a machine without the files.
Test tools are not needed to make them (no pytest here)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
from torch import nn

import resnet
from resnet.weights.keras import _layer_name


def keras_standin(path: Path, arch: str) -> None:
    """A legacy Keras HDF5 weights file (the published files' layout) of random values."""
    model = resnet.build_model(arch, 1000, "keras", source="keras")
    role = {"weight": "kernel", "bias": "bias"}
    bn_role = {"weight": "gamma", "bias": "beta", "running_mean": "moving_mean", "running_var": "moving_variance"}
    layers: dict[str, dict[str, np.ndarray]] = {}
    for key, value in model.state_dict().items():
        module_name, attr = key.rsplit(".", 1)
        if attr == "num_batches_tracked":
            continue
        module = model.get_submodule(module_name)
        array = value.detach().numpy()
        if isinstance(module, nn.Conv2d) and attr == "weight":
            array = array.transpose(2, 3, 1, 0)  # OIHW -> HWIO
        elif isinstance(module, nn.Linear) and attr == "weight":
            array = array.T
        name = (bn_role if isinstance(module, nn.BatchNorm2d) else role)[attr]
        layers.setdefault(_layer_name(module_name, arch.endswith("_v2")), {})[name] = array
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = [n.encode() for n in layers]
        for layer, weights in layers.items():
            group = f.create_group(layer)
            group.attrs["weight_names"] = [f"{layer}/{n}:0".encode() for n in weights]
            for n, array in weights.items():
                group[f"{layer}/{n}:0"] = array
