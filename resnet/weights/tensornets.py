"""TensorNets' own weight files (taehoonlee/tensornets), read without TensorFlow.

Format (``tensornets/utils.py``: ``save`` writes, ``parse_weights`` reads): ``np.savez(path,
names=..., values=...)``: ``names`` the TF variable names (``resnext50c32/conv2/block1/0/conv/
weights:0``), ``values`` the arrays in the TF graph's variable creation order, which
``pretrained_initializer`` assigns by position; a BN's beta comes before its gamma where the
names say so (TF < 1.4 created it first; ``parse_weights`` swaps them for newer TF). Kernels are
HWIO, dense kernels (in, out); ResNeXt's grouped 3x3 is a depthwise kernel (3, 3, width,
width / groups) whose outputs a constant 1x1 sums group by group (``layers.gconvbn``).

The files of the ResNet family are :data:`MODELS`' (``pretrained.py``); :func:`tf_layers` lists each
one's layers in their variable order (``resnets.py``). ``resnet50|101|152.h5`` (MSRA's Caffe v1 weights) are
refused: TensorNets reads them in the stored order of an HDF5 file its author wrote, whose layer names it
never documents; Keras serves these weights (``keras:ResNet50``). ResNet200v2's conv biases fold into the
BN after them as in :mod:`.fbtorch` (it is fb.resnet.torch's model).

``values`` is a pickled object array (numpy pickles ragged arrays): an unpickler that builds
numpy arrays and nothing else reads it, so no code in the file runs. The origin protocol is
TensorNets' (``examples/evaluate_imagenet*``): resize to crop * 8 // 7, bilinear, centre crop;
torch mean/std for the Torch models (it normalised WideResNet50 with CIFAR-like statistics,
0.491/0.482/0.447 and 0.247/0.244/0.262, which data.normalize does not offer), [-1, 1] for v2.
"""

from __future__ import annotations

import pickle
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..archs import ALIASES
from ..archs import ARCHS as ARCH_TABLE
from ..checkpoint import CheckpointError
from ..checkpoint.errors import error_line
from ..checkpoint.load import shapes
from ..model import ResNet, build_model
from .common import LoadedWeights, OriginProtocol, WeightsError, WeightsSpec, WeightsUnavailable, assign
from .fbtorch import fold_conv_biases

# TensorNets' model (its variable scope) -> ours and its published file (pretrained.py).
MODELS = {
    "resnet200v2": ("resnet200_v2", "resnet_v2_200.npz"),
    "resnext50c32": ("resnext50_32x4d", "resnext_50_32x4d.npz"),
    "resnext101c32": ("resnext101_32x4d", "resnext_101_32x4d.npz"),
    "resnext101c64": ("resnext101_64x4d", "resnext_101_64x4d.npz"),
    "wideresnet50": ("wide_resnet50_2", "wrn_50_2.npz"),
    "resnet50v2": ("resnet50_v2", "resnet_v2_50.npz"),
    "resnet101v2": ("resnet101_v2", "resnet_v2_101.npz"),
    "resnet152v2": ("resnet152_v2", "resnet_v2_152.npz"),
}
REFUSED = {"resnet50": "resnet50_v1", "resnet101": "resnet101_v1", "resnet152": "resnet152_v1"}  # the .h5 files
_BY_SCOPE = {scope: arch for scope, (arch, _) in MODELS.items()}
_SCOPES = {arch: scope for scope, arch in _BY_SCOPE.items()}
ARCHS = tuple(arch for arch, _ in MODELS.values())
FORMS = ("tensornets:/path/to/resnext_50_32x4d.npz",)
EXPECTED = "a file path (one of TensorNets' .npz weight files)"
TORCH_ORIGIN = OriginProtocol(crop=224, resize=256, interpolation="bilinear", preprocessing="torch")
SLIM_ORIGIN = OriginProtocol(crop=299, resize=341, interpolation="bilinear", preprocessing="tf")
# TF variables per layer, in creation order; a BN's four are told apart by name.
ROLES = {
    "conv": ("weights",),
    "conv+b": ("weights", "biases"),
    "depthwise": ("depthwise_weights",),
    "bn": ("beta", "gamma", "moving_mean", "moving_variance"),  # TensorNets' README, print_weights()
    "fc": ("weights", "biases"),
}
# What a cut-short or damaged zip, .npy header or pickle raises.
_DAMAGED = (
    zipfile.BadZipFile,
    zlib.error,
    OSError,
    EOFError,
    ValueError,
    pickle.UnpicklingError,
    TypeError,
    AttributeError,
    KeyError,
    IndexError,
)
_BN_KEYS = {"gamma": "weight", "beta": "bias", "moving_mean": "running_mean", "moving_variance": "running_var"}
# Numpy's pickles of arrays name these globals and no others (numpy 2 moved numpy.core to numpy._core;
# _codecs.encode makes the bytes of protocol-2 pickles).
_ARRAY_GLOBALS = {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")} | {
    (f"numpy.{core}.multiarray", name) for core in ("core", "_core") for name in ("_reconstruct", "scalar")
}


def from_tensornets(names: list[str], values: list[np.ndarray], arch: str, where: object = None) -> ResNet:
    """TensorNets' variables (names and arrays in its graph's order) as our ``arch``, eval mode.

    Each array is checked, in order, against the variable ``arch``'s TensorNets twin creates
    there (role by name, shape); the first that does not fit raises
    :class:`resnet.checkpoint.CheckpointError`, one line naming ``where``, the index and name,
    and what was expected.
    """
    name = _pick(arch)
    where = where or "the weights"
    if len(names) != len(values):
        raise CheckpointError(f"{where} has {len(names)} names for {len(values)} arrays; it is damaged")
    head = values[-2] if len(values) > 1 else np.zeros((0, 0))
    num_classes = head.shape[-1] if head.ndim in (2, 4) else 1000
    fb = ARCH_TABLE[name].block == "preact_raw_shortcut"  # ResNet200v2: biases on every conv
    with torch.device("meta"):
        model = build_model(name, num_classes, source="tensornets", **({"conv_bias": "unnormed"} if fb else {}))
    variables = tf_variables(model)
    if len(values) != len(variables):
        raise CheckpointError(
            f"{where} holds {len(values)} arrays where TensorNets' {_SCOPES[name]} has {len(variables)}: "
            f"it is another model; pass model=<arch> naming the one it is ({', '.join(ARCHS)})"
        )
    ours = {}
    for i, ((kind, role, key, want), array, tf_name) in enumerate(zip(variables, values, names)):
        named = tf_name.rsplit("/", 1)[-1].split(":")[0]  # the variable's role: .../gamma:0 -> gamma
        if kind == "bn" and named in _BN_KEYS:  # the file's order of a BN's four: go by name
            role, key = named, f"{key.rsplit('.', 1)[0]}.{_BN_KEYS[named]}"
        if kind == "fc" and array.ndim == 4 and array.shape[:2] == (1, 1):  # a 1x1-conv head, as TF-slim's
            array = array.reshape(array.shape[2:])
        if named != role or tuple(array.shape) != want or key in ours:
            again = " a second time" if key in ours else ""
            raise CheckpointError(
                f"{where} does not fit TensorNets' {_SCOPES[name]}: values[{i}] {tf_name!r} is "
                f"{tuple(array.shape)}{again}, expected {role} of shape {want} for {key}; it is another model"
            )
        ours[key] = _convert(kind, role, np.asarray(array, dtype=np.float32))
    ours = fold_conv_biases(ours) if fb else ours
    ours.update({k: torch.tensor(0) for k in model.state_dict() if k.endswith("num_batches_tracked")})
    return assign(model, ours)


def tf_variables(model: ResNet) -> list[tuple[str, str, str, tuple[int, ...]]]:
    """(layer kind, TF variable role, our key, TF shape) of every variable of ``model``'s
    TensorNets twin, in creation order; a BN's four in the order of TensorNets' files."""
    ours = shapes(model)
    return [
        (kind, role, *_target(kind, module, role, ours)) for kind, module in tf_layers(model) for role in ROLES[kind]
    ]


def tf_layers(model: ResNet) -> list[tuple[str, str]]:
    """(kind, our module) of every TF layer of ``model``'s TensorNets twin, in creation order
    (``resnets.py``: ``_block2`` for ResNet200v2, ``_block2s`` for v2, ``_block3``/``_blockw``)."""
    block = ARCH_TABLE[model.meta.arch].block
    preact, fb = block.startswith("preact"), block == "preact_raw_shortcut"
    layers = [("conv+b" if preact else "conv", "conv1")] + ([] if preact and not fb else [("bn", "bn1")])
    for s in range(model.num_stages):
        for j, unit in enumerate(getattr(model, f"layer{s + 1}")):
            u = f"layer{s + 1}.{j}"
            shortcut = isinstance(unit.downsample, nn.Sequential)  # a strided identity is a parameterless pool
            if fb:
                layers += [("conv+b", f"{u}.downsample.0"), ("bn", f"{u}.downsample.1")] if shortcut else []
                layers += [("bn", f"{u}.bn1"), ("conv+b", f"{u}.conv1"), ("bn", f"{u}.bn2")]
                layers += [("conv+b", f"{u}.conv2"), ("bn", f"{u}.bn3"), ("conv+b", f"{u}.conv3")]
            elif preact:  # TF-slim v2: the projection reads the pre-activation
                layers += [("bn", f"{u}.bn1")] + ([("conv+b", f"{u}.downsample.0")] if shortcut else [])
                layers += [("conv", f"{u}.conv1"), ("bn", f"{u}.bn2"), ("conv", f"{u}.conv2"), ("bn", f"{u}.bn3")]
                layers += [("conv+b", f"{u}.conv3")]
            else:
                grouped = "depthwise" if unit.conv2.groups > 1 else "conv"
                layers += [("conv", f"{u}.downsample.0"), ("bn", f"{u}.downsample.1")] if shortcut else []
                layers += [("conv", f"{u}.conv1"), ("bn", f"{u}.bn1"), (grouped, f"{u}.conv2"), ("bn", f"{u}.bn2")]
                layers += [("conv", f"{u}.conv3"), ("bn", f"{u}.bn3")]
    return layers + ([("bn", "final_bn")] if preact else []) + [("fc", "fc")]


def load(spec: WeightsSpec, arch: str | None, download: bool) -> LoadedWeights:
    path = spec.path
    if path.suffix == ".h5":
        raise WeightsError(_refusal(path, "its .h5 files"))
    if not path.is_file():
        raise WeightsUnavailable(
            f"no TensorNets weights file at {path}; download it from "
            "https://github.com/taehoonlee/deep-learning-models/releases (resnet/<file>, see tensornets/pretrained.py)"
        )
    names, values = read_npz(path)
    name = arch or _arch_of(names, path)
    model = from_tensornets(names, values, name, path)
    origin = SLIM_ORIGIN if ARCH_TABLE[model.meta.arch].block == "preact" else TORCH_ORIGIN
    return LoadedWeights(model, origin)


def read_npz(path: Path) -> tuple[list[str], list[np.ndarray]]:
    """(names, values) of a TensorNets ``.npz``; never runs code from the file.

    A file that is not one (not a zip of .npy files, no ``values``, no ``names``, a pickled
    object other than numpy arrays) raises :class:`resnet.checkpoint.CheckpointError`."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = set(archive.namelist())
            if "values.npy" not in members or "names.npy" not in members:
                raise CheckpointError(
                    f"{path} is an .npz without {'values' if 'values.npy' not in members else 'names'} "
                    f"(it has {', '.join(sorted(members)) or 'nothing'}): not a TensorNets weights file; "
                    "TensorNets' own files have names (BN gamma and beta cannot be told apart without them)"
                )
            values = _read_npy(archive, "values.npy", path)
            names = _read_npy(archive, "names.npy", path)
    except _DAMAGED as err:
        if isinstance(err, CheckpointError):
            raise
        raise CheckpointError(
            f"{path} is not a readable TensorNets weights file ({error_line(err)}): it is cut short, damaged, "
            "or not an .npz; download it again"
        ) from None
    if not isinstance(values, np.ndarray) or not isinstance(names, np.ndarray) or values.ndim != 1:
        raise CheckpointError(f"{path} holds no list of arrays under values: not a TensorNets weights file")
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in names.tolist()]
    arrays = list(values) if values.dtype == object else [values[i] for i in range(len(values))]
    for i, array in enumerate(arrays):
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "fiu":
            raise CheckpointError(f"{path} has {type(array).__name__} at values[{i}], where an array belongs")
    return names, arrays


class _Refused(pickle.UnpicklingError):
    """A pickled global other than numpy's array machinery; the message is its name."""


class _ArraysOnly(pickle.Unpickler):
    """Unpickles numpy arrays and nothing else: any other global (a function, a class) is refused."""

    def find_class(self, module: str, name: str):
        if (module, name) not in _ARRAY_GLOBALS:
            raise _Refused(f"{module}.{name}")
        if module.startswith("numpy.core."):  # numpy 2 renamed it numpy._core (numpy.core still warns)
            try:
                return super().find_class("numpy._core." + module.removeprefix("numpy.core."), name)
            except (ImportError, AttributeError):
                pass
        return super().find_class(module, name)


def _read_npy(archive: zipfile.ZipFile, member: str, path: Path) -> np.ndarray:
    with archive.open(member) as f:
        version = np.lib.format.read_magic(f)
        header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        _, _, dtype = header(f)
        if not dtype.hasobject:
            with archive.open(member) as again:
                return np.lib.format.read_array(again, allow_pickle=False)
        try:  # an object array is a pickle after the header
            return _ArraysOnly(f, encoding="latin1").load()  # latin1: arrays pickled by Python 2
        except _Refused as err:
            raise CheckpointError(
                f"refusing to load {path}: its {member} holds pickled {err}, not only numpy arrays, and "
                "unpickling it could run arbitrary code; TensorNets' own files hold arrays only"
            ) from None


def _pick(arch: str) -> str:
    name = _BY_SCOPE.get(arch, arch)
    name = ALIASES.get(name, name)
    if name in REFUSED.values():
        raise WeightsError(_refusal(arch, f"{arch}'s file"))
    if name not in ARCHS:
        raise ValueError(
            f"from_tensornets cannot import {arch!r}; choose one of {', '.join(ARCHS)} "
            f"(or TensorNets' names: {', '.join(MODELS)})"
        )
    return name


def _arch_of(names: list[str], path: Path) -> str:
    """Our arch from the variable scope TensorNets saved under, else from its published file name."""
    scope = names[0].split("/")[0] if names else ""
    if scope in REFUSED:
        raise WeightsError(_refusal(path, f"{scope}'s variables"))
    by_file = {file: arch for arch, file in MODELS.values()}
    found = MODELS.get(scope, (None,))[0] or by_file.get(path.name)
    if found is None:
        raise WeightsError(
            f"{path}: cannot tell which model it holds (its variables are under {scope!r}, which is none of "
            f"{', '.join(MODELS)}); name the architecture with model=<arch> ({', '.join(ARCHS)})"
        )
    return found


def _refusal(what: object, which: str) -> str:
    return (
        f"{what}: TensorNets' ResNet50/101/152 (v1, {which}) are not read here: TensorNets loads its .h5 files in "
        "the stored order of layers its author named in an undocumented conversion; keras:ResNet50 / "
        "keras:ResNet101 / keras:ResNet152 serve MSRA's Caffe weights for these models"
    )


def _target(kind: str, module: str, role: str, ours: dict) -> tuple[str, tuple[int, ...]]:
    """(our key, the TF shape expected) for variable ``role`` of layer ``module``."""
    if kind == "bn":
        key = f"{module}.{_BN_KEYS[role]}"
        return key, ours[key]
    if role == "biases":
        key = f"{module}.bias"
        return key, (ours[f"{module}.weight"][0],)
    key = f"{module}.weight"
    out_ch, in_ch, kh, kw = (*ours[key], 1, 1)[:4]
    if kind == "fc":
        return key, (in_ch, out_ch)
    if kind == "depthwise":  # (3, 3, width, width / groups): one filter per input channel and output
        return key, (kh, kw, out_ch, in_ch)
    return key, (kh, kw, in_ch, out_ch)


def _convert(kind: str, role: str, array: np.ndarray) -> torch.Tensor:
    """A TF array in our layout: HWIO -> OIHW, (in, out) -> (out, in), depthwise -> grouped."""
    value = torch.from_numpy(array.copy())
    if role == "depthwise_weights":
        # gconvbn: depthwise output k * c + m (input channel k = g * c + j, multiplier m) feeds
        # output g * c + m, so grouped weight [g * c + m, j] = depthwise[:, :, g * c + j, m].
        kh, kw, width, c = value.shape
        return value.reshape(kh, kw, width // c, c, c).permute(2, 4, 3, 0, 1).reshape(width, c, kh, kw).contiguous()
    if role == "weights" and kind == "fc":
        return value.T.contiguous()
    if role == "weights":
        return value.permute(3, 2, 0, 1).contiguous()
    return value
