"""fb.resnet.torch's pre-activation ResNet-200 (``resnet-200.t7``), converted to a PyTorch file.

fb.resnet.torch publishes Torch7 files only; people convert them. Both layouts the converters
write are read here, with ``torch.load(weights_only=True)`` (no pickled code runs):

* the numbered state dict of an ``nn.Sequential`` mirroring the Lua module tree
  (clcarwin/convert_torch_to_pytorch ``convert_torch.py``; TensorNets' ``resnet_200_cpu.pth``).
  Top level (fb.resnet.torch ``models/preresnet.lua``): ``0`` conv1, ``1`` BN, ``4``-``7`` the
  stages, ``9`` the final BN, ``13.1`` the Linear (``13.0`` is the converter's reshape; the
  rest are ReLU, max pool, ``nn.Copy``, average pool, View). Unit ``j`` of stage ``s`` is
  ``s.j.0`` (a ConcatTable; ``s.j.1`` the CAddTable): its residual branch ``s.j.0.0.<k>``,
  k = 0 BN, 2 conv 1x1, 3 BN, 5 conv 3x3, 6 BN, 8 conv 1x1 (1, 4, 7 are ReLUs), and its
  projection shortcut ``s.j.0.1.0`` conv, ``s.j.0.1.1`` BN (an Identity in other units).
* a list of tensors in Lua module order: each conv ``weight[, bias]``, each BN ``weight, bias,
  running_mean, running_var``, the Linear ``weight, bias``; a unit's branch comes before its
  shortcut (Cadene/pretrained-models.pytorch ``fbresnet/resnet152_dump.lua`` dumps
  ``net:parameters()`` this way). ``num_batches_tracked`` scalars may be in either layout.

In the commit that published resnet-200.t7 (c530106, Apr 2016) ``layer()`` dropped its
``'first'`` argument, so every unit, stage 1's included, opens its branch with BN+ReLU
(BetterZH/pytorch_caption ``cnn/resnet200.py``, which the converter generated from the file,
and TensorNets' ``_block2`` agree). Its convs carry biases (the generated source omits
``bias=`` only when it is True; TensorNets' move rules name ``*.0.0.1.0.bias``). The bias of a
conv that a BN follows folds into that BN's running mean, exactly (:func:`fold_conv_biases`); the
branch's last conv keeps its bias, so a file with biases builds ``resnet200_v2`` with
``conv_bias="unnormed"`` (recorded in ``meta.overrides``). Models trained
with later versions of preresnet.lua (stage 1 without pre-activation, ``both_preact`` units,
shortcuts without BN) are laid out otherwise and refused at their first differing tensor.

Native preset ``symmetric``. The publisher's protocol (fb.resnet.torch ``pretrained/classify.lua``,
``datasets/imagenet.lua``): ``Scale(256)``, bicubic by default (``datasets/transforms.lua``),
mean/std normalisation, ``CenterCrop(224)``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

import torch

from ..checkpoint import CheckpointError, read_torch_file
from ..checkpoint.errors import describe, printable
from ..checkpoint.load import shapes
from ..model import ResNet, build_model
from .common import LoadedWeights, OriginProtocol, WeightsError, WeightsSpec, WeightsUnavailable, assign, pick_arch

ARCHS = ("resnet200_v2",)
FORMS = ("fbtorch:/path/to/resnet200.pth",)
EXPECTED = "a file path (fb.resnet.torch's resnet-200.t7 converted to a PyTorch state dict)"
ORIGIN = OriginProtocol(crop=224, resize=256, interpolation="bicubic", preprocessing="torch")

# The tensors a converter writes per Torch7 module, in order (convs: "bias" only if the file has them).
TENSORS = {
    "conv": ("weight", "bias"),
    "bn": ("weight", "bias", "running_mean", "running_var"),
    "linear": ("weight", "bias"),
}
# A pre-activation unit's residual branch, nn.Sequential indices (preresnet.lua bottleneck()).
_BRANCH = (("bn1", 0), ("conv1", 2), ("bn2", 3), ("conv2", 5), ("bn3", 6), ("conv3", 8))
_FIRST_STAGE = 4  # conv, BN, ReLU, max pool come first
_FINAL_BN, _LINEAR = "9", "13.1"  # 8 is nn.Copy; 10-12 ReLU, average pool, View; 13.0 a reshape
# Our convs that a BN follows in a pre-activation model, and that BN.
_BN_AFTER = (
    (r"^conv1$", "bn1"),
    (r"^(layer\d+\.\d+)\.conv1$", r"\1.bn2"),
    (r"^(layer\d+\.\d+)\.conv2$", r"\1.bn3"),
    (r"^(layer\d+\.\d+)\.downsample\.0$", r"\1.downsample.1"),
)


def from_fbtorch(
    weights: Mapping[str, torch.Tensor] | Sequence[torch.Tensor], arch: str = "resnet200_v2", where: object = None
) -> ResNet:
    """A converted fb.resnet.torch pre-activation ResNet (numbered state dict or tensor list), eval mode.

    Every tensor's shape is checked; the first one that does not fit (or is missing, or left
    over) raises :class:`resnet.checkpoint.CheckpointError`, one line naming ``where`` (the file),
    the key or list index, and what was expected there.
    """
    name = pick_arch(arch, ARCHS, "from_fbtorch")
    where = where or "the weights"
    if isinstance(weights, Mapping):
        tensors = {k: v for k, v in weights.items() if not str(k).endswith("num_batches_tracked")}
        _check_tensors(tensors.items(), where)
        biases = "0.bias" in tensors
        linear = tensors.get(f"{_LINEAR}.weight")
    elif isinstance(weights, (list, tuple)):
        _check_tensors(enumerate(weights), where)
        tensors = [t for t in weights if t.ndim > 0]  # num_batches_tracked scalars carry nothing
        biases = None
        linear = tensors[-2] if len(tensors) > 1 else None
    else:
        raise CheckpointError(
            f"{where} holds {describe(weights)}, not a converted fb.resnet.torch model (a state dict with "
            "numbered keys, or a list of tensors); convert resnet-200.t7 with convert_torch_to_pytorch"
        )
    num_classes = linear.shape[0] if linear is not None and linear.ndim == 2 else 1000
    slots = torch7_slots(name, num_classes)
    if biases is None:  # a list: told from its length
        with_biases, without = len(slots), len(_used(slots, False))
        if len(tensors) not in (with_biases, without):
            raise CheckpointError(
                f"{where} is a list of {len(tensors)} tensors; fb.resnet.torch's {name} in Lua module order has "
                f"{with_biases} (convs with biases) or {without} (without): it is another model"
            )
        biases = len(tensors) == with_biases
    ours = _match(tensors, _used(slots, biases), name, where)
    with torch.device("meta"):  # shapes only: assign() puts the file's tensors in
        model = build_model(name, num_classes, source="fbtorch", conv_bias="unnormed" if biases else "none")
    ours = fold_conv_biases(ours)
    ours.update({k: torch.tensor(0) for k in model.state_dict() if k.endswith("num_batches_tracked")})
    return assign(model, ours)


def load(spec: WeightsSpec, arch: str | None, download: bool) -> LoadedWeights:
    if spec.path.suffix == ".t7":
        raise WeightsError(
            f"{spec.path} is a Torch7 file, which is not read here (its format is Lua's serialisation); convert it "
            "to a PyTorch state dict first (e.g. github.com/clcarwin/convert_torch_to_pytorch) and pass the .pth"
        )
    if not spec.path.is_file():
        raise WeightsUnavailable(
            f"no converted fb.resnet.torch file at {spec.path}; convert resnet-200.t7 "
            "(github.com/facebookarchive/fb.resnet.torch, pretrained/README.md) to a PyTorch state dict"
        )
    name = pick_arch(arch or ARCHS[0], ARCHS, "from_fbtorch")  # before reading 260 MB
    weights = read_torch_file(spec.path)  # unreadable, pickled code: one CheckpointError line
    return LoadedWeights(from_fbtorch(weights, name, spec.path), ORIGIN)


@functools.cache
def torch7_slots(arch: str, num_classes: int = 1000) -> tuple[tuple[str, str, str, tuple[int, ...]], ...]:
    """(Torch7 key, our key, module kind, shape) for every tensor of ``arch``'s fb.resnet.torch
    twin, in Lua module order, conv biases included (our key ``<conv>.bias`` even where our
    model folds it away). Cached: building ResNet-200, even on the meta device, takes a while."""
    with torch.device("meta"):
        model = build_model(arch, num_classes, conv_bias="unnormed")
    ours = shapes(model)
    modules = [("0", "conv1", "conv"), ("1", "bn1", "bn")]
    for s in range(model.num_stages):
        for j, unit in enumerate(getattr(model, f"layer{s + 1}")):
            theirs, mine = f"{_FIRST_STAGE + s}.{j}.0", f"layer{s + 1}.{j}"
            modules += [(f"{theirs}.0.{k}", f"{mine}.{layer}", layer[:-1]) for layer, k in _BRANCH]
            if unit.downsample is not None:
                modules += [
                    (f"{theirs}.1.0", f"{mine}.downsample.0", "conv"),
                    (f"{theirs}.1.1", f"{mine}.downsample.1", "bn"),
                ]
    modules += [(_FINAL_BN, "final_bn", "bn"), (_LINEAR, "fc", "linear")]
    slots = []
    for theirs, mine, kind in modules:
        for tensor in TENSORS[kind]:
            shape = (ours[f"{mine}.weight"][0],) if kind == "conv" and tensor == "bias" else ours[f"{mine}.{tensor}"]
            slots.append((f"{theirs}.{tensor}", f"{mine}.{tensor}", kind, shape))
    return tuple(slots)


def fold_conv_biases(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Fold the bias of each conv that a BN follows into that BN's running mean (our keys).

    Eval-mode BN computes ``(x - mean) / sqrt(var + eps) * weight + bias``, so a constant
    added to ``x`` is the same as one subtracted from ``mean``. Biases of other convs stay."""
    folded = dict(weights)
    for key in [k for k in weights if k.endswith(".bias")]:
        conv = key.removesuffix(".bias")
        for pattern, bn in _BN_AFTER:
            if re.match(pattern, conv):
                mean = f"{re.sub(pattern, bn, conv)}.running_mean"
                folded[mean] = folded[mean] - folded.pop(key)
                break
    return folded


def _check_tensors(items, where: object) -> None:
    for key, value in items:
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"{where} has {describe(value)} at {printable(str(key))}, where a tensor belongs; "
                "it is not a converted fb.resnet.torch model"
            )


def _used(slots: tuple, biases: bool) -> list:
    """The slots a file has: conv biases only if its convs have them."""
    return [slot for slot in slots if biases or not (slot[2] == "conv" and slot[0].endswith(".bias"))]


def _match(tensors: Mapping[str, torch.Tensor] | Sequence[torch.Tensor], used: list, arch: str, where: object) -> dict:
    """Our state dict from the file's tensors, by key or by position in Lua module order (``used``: the
    file's slots), each checked in Lua order: the first problem is the one reported."""
    by_key, ours = isinstance(tensors, Mapping), {}
    for i, (theirs, mine, _, shape) in enumerate(used):
        if by_key and theirs not in tensors:
            raise CheckpointError(
                f"{where} has no {theirs} ({mine} of fb.resnet.torch's {arch}, numbered as convert_torch_to_pytorch "
                f"numbers the Lua model; its first key is {next(iter(tensors), None)!r}); "
                "pass a converted resnet-200.t7"
            )
        tensor = tensors[theirs] if by_key else tensors[i]
        if tuple(tensor.shape) != shape:
            said = theirs if by_key else f"tensor {i} ({theirs} in Lua module order)"
            raise CheckpointError(
                f"{where} does not fit fb.resnet.torch's {arch}: {said} is {tuple(tensor.shape)}, "
                f"expected {shape} for {mine}; it is another model or a damaged conversion"
            )
        ours[mine] = tensor.detach().to(torch.float32, copy=True)  # never the caller's storage
    extra = [k for k in tensors if k not in {theirs for theirs, *_ in used}] if by_key else []
    if extra:
        raise CheckpointError(
            f"{where} has {len(extra)} tensor(s) fb.resnet.torch's {arch} does not, e.g. {printable(str(extra[0]))} "
            f"{tuple(tensors[extra[0]].shape)}; it is another model"
        )
    return ours
