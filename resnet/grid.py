"""Grid-robust models: one set of weights, trained and run under several padding schemes
(docs/training.md, "Grid-robust training").

:func:`make_grid` makes a model's stride-2 sites follow whichever preset :func:`set_grid` names, by
one attribute per site. Under each preset the outputs equal, bit for bit, those of a model built
under it (tests/models/test_grid.py), since each site pads as that preset's layer says it does
(:func:`resnet.padding.layer_pad`, pad and mode) and calls the same op
(:func:`resnet.padding.conv_with_pads`, :func:`resnet.padding.make_max_pool`). Training draws each
step's preset with :func:`draw`; result rows name the weights :func:`grid_name` of the list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .padding import (
    BLUR_SITES,
    CONV_PAD_MODES,
    AppliedPad,
    Padding,
    conv_like,
    conv_with_pads,
    is_strided_conv,
    layer_pad,
    make_conv,
    make_max_pool,
    pad_at_any_size,
    resolve_padding,
)
from .schema import choices


class GridConv2d(nn.Conv2d):
    """A strided conv whose pads follow ``schemes[active]`` (conv schemes of :mod:`resnet.padding`).

    Each scheme's conv is built once by :func:`resnet.padding.make_conv`, on the meta device, and
    asked for its pad (amounts and mode): once, here, where it is fixed (:func:`resnet.padding.pad_at_any_size`),
    else at each input (:func:`resnet.padding.layer_pad`, SAME). Those layers are never run and hold
    no state (not submodules: no state-dict key). A scheme whose layer pads with a mode a conv
    cannot run on (not one of :data:`resnet.padding.CONV_PAD_MODES`) is refused here."""

    def __init__(self, *args, schemes: Sequence[str], **kwargs) -> None:
        super().__init__(*args, padding=0, **kwargs)
        self.schemes = tuple(schemes)
        self.active = 0
        (k, kw), (s, sw), (d, dw) = self.kernel_size, self.stride, self.dilation
        if (k, s, d) != (kw, sw, dw):
            raise ValueError(f"a grid conv is square, as make_conv builds it: not {self.kernel_size}/{self.stride}")
        with torch.device("meta"):
            self.layers = tuple(make_conv(scheme, self.in_channels, self.out_channels, k, s, self.groups,
                                          dilation=d) for scheme in self.schemes)  # fmt: skip
        self.fixed = tuple(map(pad_at_any_size, self.layers))  # None: the pad follows the input's size
        for scheme, layer in zip(self.schemes, self.layers):
            mode = layer_pad(layer, (1, 1)).mode  # the mode never depends on the input size
            if mode not in CONV_PAD_MODES:
                raise ValueError(
                    f"a grid conv cannot hold the {scheme!r} scheme: its layer pads with {mode!r}, "
                    f"and a conv runs on {', '.join(CONV_PAD_MODES)} only"
                )

    @classmethod
    def like(cls, conv: nn.Conv2d, schemes: Sequence[str]) -> GridConv2d:
        """A GridConv2d holding ``conv``'s own parameters (the same tensors)."""
        return conv_like(cls, conv, schemes=schemes)

    def applied_pad(self, input_hw: tuple[int, int]) -> AppliedPad:
        """The active preset's pad for an ``input_hw`` input: what its own layer applies."""
        fixed = self.fixed[self.active]
        return fixed if fixed is not None else layer_pad(self.layers[self.active], input_hw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return conv_with_pads(self, x, self.applied_pad(x.shape[-2:]))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, schemes={self.schemes}"


class GridMaxPool2d(nn.Module):
    """The stem max pool of each preset (no parameters), ``variants[active]`` applied."""

    def __init__(self, schemes: Sequence[str], value: str) -> None:
        super().__init__()
        self.variants = nn.ModuleList(make_max_pool(scheme, value) for scheme in schemes)
        self.active = 0

    def applied_pad(self, input_hw: tuple[int, int]) -> AppliedPad:
        """The active preset's pool's pad (amounts and mode)."""
        return layer_pad(self.variants[self.active], input_hw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.variants[self.active](x)


class GridBatchNorm2d(nn.BatchNorm2d):
    """A BatchNorm whose running statistics follow the active preset (``make_grid(bn="statistics")``): one
    running mean, variance and batch count per preset; the affine weight and bias shared, or with
    ``affine_per_preset`` one per preset too (``bn="affine"``), as an offset from preset 0's.

    Preset 0's statistics are the plain BatchNorm's buffers (``running_mean``, ``running_var``,
    ``num_batches_tracked``), so a plain model loading the state dict (the ``grid_*`` keys
    dropped, :func:`preset_state_dict`) runs under the grid's first preset as the grid model
    does. Presets 1.. are rows of ``grid_running_mean`` / ``grid_running_var`` [presets - 1, C]
    and entries of ``grid_num_batches_tracked`` [presets - 1]. In training mode a forward
    updates the active preset's statistics only; :meth:`reset_running_stats` resets the active
    preset's only (so :func:`resnet.regrid.reestimate_bn` re-measures the active grid's).

    Per-preset affine: preset 0's weight and bias are the plain ``weight`` / ``bias``; preset p's
    are those plus row p - 1 of the parameters ``grid_weight_offset`` / ``grid_bias_offset``
    [presets - 1, C], which start at zero. So every step trains the shared part and only the
    active preset's offset: rows of absolute values, each trained on its preset's steps only,
    learn the common part at 1/presets of the rate (measured against offsets: docs/benchmarks.md,
    "Grid candidates"). Every forward indexes the stack of all offsets, so every
    parameter is in every step's graph (DDP finds none unused; the other presets' offsets get
    zero gradients)."""

    def __init__(self, num_features: int, presets: int, affine_per_preset: bool = False, **kwargs) -> None:
        super().__init__(num_features, **kwargs)
        if not self.track_running_stats:
            raise ValueError("per-grid statistics need a BatchNorm that tracks running statistics")
        factory = {"device": self.running_mean.device}
        self.register_buffer("grid_running_mean", torch.zeros(presets - 1, num_features, **factory))
        self.register_buffer("grid_running_var", torch.ones(presets - 1, num_features, **factory))
        self.register_buffer("grid_num_batches_tracked", torch.zeros(presets - 1, dtype=torch.long, **factory))
        if affine_per_preset:
            if not self.affine:
                raise ValueError("per-grid affine weights need a BatchNorm with affine weights")
            self.grid_weight_offset = nn.Parameter(torch.zeros(presets - 1, num_features, **factory))
            self.grid_bias_offset = nn.Parameter(torch.zeros(presets - 1, num_features, **factory))
        self.active = 0

    @classmethod
    def like(cls, bn: nn.BatchNorm2d, presets: int, affine_per_preset: bool = False) -> GridBatchNorm2d:
        """A GridBatchNorm2d holding ``bn``'s parameters and preset-0 buffers (the same tensors),
        every other preset's statistics starting as copies of ``bn``'s (and its affine offsets at
        zero: ``bn``'s weight and bias)."""
        with torch.device("meta"):
            grid = cls(bn.num_features, presets, affine_per_preset, eps=bn.eps, momentum=bn.momentum, affine=bn.affine)
        grid.weight, grid.bias = bn.weight, bn.bias
        grid.running_mean, grid.running_var = bn.running_mean, bn.running_var
        grid.num_batches_tracked = bn.num_batches_tracked
        grid.grid_running_mean = bn.running_mean.detach().clone().expand(presets - 1, -1).contiguous()
        grid.grid_running_var = bn.running_var.detach().clone().expand(presets - 1, -1).contiguous()
        grid.grid_num_batches_tracked = bn.num_batches_tracked.detach().clone().expand(presets - 1).contiguous()
        if affine_per_preset:
            grid.grid_weight_offset = nn.Parameter(bn.weight.detach().new_zeros(presets - 1, bn.num_features))
            grid.grid_bias_offset = nn.Parameter(bn.bias.detach().new_zeros(presets - 1, bn.num_features))
        return grid.train(bn.training)

    def statistics(self, preset: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(running mean, running var, batches tracked) of ``preset`` (default: the active one):
        views of the buffers, so that updating them in place updates that preset's."""
        index = self.active if preset is None else preset
        if index == 0:
            return self.running_mean, self.running_var, self.num_batches_tracked
        rows = self.grid_running_mean, self.grid_running_var, self.grid_num_batches_tracked
        return tuple(row[index - 1] for row in rows)

    def reset_parameters(self) -> None:
        super().reset_parameters()  # nn.BatchNorm2d.__init__ calls it before the per-preset rows exist
        if hasattr(self, "grid_weight_offset"):
            nn.init.zeros_(self.grid_weight_offset)
            nn.init.zeros_(self.grid_bias_offset)

    def reset_running_stats(self) -> None:
        if not hasattr(self, "grid_running_mean"):  # nn.BatchNorm2d.__init__ calls it before they exist
            return super().reset_running_stats()
        mean, var, count = self.statistics()
        mean.zero_()
        var.fill_(1)
        count.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # nn.BatchNorm2d.forward, the active preset's statistics in place of the buffers
        self._check_input_dim(x)
        mean, var, count = self.statistics()
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training:
            count.add_(1)
            factor = 1.0 / float(count) if self.momentum is None else self.momentum
        weight, bias = self.weight, self.bias
        if hasattr(self, "grid_weight_offset"):
            zero = torch.zeros_like(self.grid_weight_offset[:1])  # preset 0's offset
            weight = weight + torch.cat((zero, self.grid_weight_offset))[self.active]
            bias = bias + torch.cat((zero, self.grid_bias_offset))[self.active]
        return F.batch_norm(x, mean, var, weight, bias, self.training, factor, self.eps)

    def extra_repr(self) -> str:
        affine = ", affine_per_preset=True" if hasattr(self, "grid_weight_offset") else ""
        return f"{super().extra_repr()}, presets={self.grid_running_mean.shape[0] + 1}{affine}"


def grid_paddings(presets: Sequence[str]) -> list[Padding]:
    """The presets' Paddings, checked: at least two, all different, no blurred site, one pool pad value."""
    paddings = [resolve_padding(name) for name in presets]
    if len(paddings) < 2 or len({p.name for p in paddings}) < len(paddings):
        raise ValueError(f"grid={list(presets)} needs two or more different presets, e.g. grid=[symmetric,asymmetric]")
    if any(getattr(p, site) for p in paddings for site in BLUR_SITES):
        raise ValueError("grid training switches the padding of strided sites; blurred sites have none to switch")
    if len({p.stem_pool_value for p in paddings}) > 1:
        raise ValueError(f"grid={list(presets)} mixes stem pool pad values (-inf and zero); keep presets of one")
    return paddings


# What each BatchNorm keeps per preset (train.py's grid_bn=): its running statistics; those and its
# affine weight and bias; nothing (one BatchNorm for every preset).
GRID_BN = choices("grid_bn")  # statistics, affine, shared


def make_grid(model: nn.Module, presets: Sequence[str], bn: str = "shared") -> nn.Module:
    """Make ``model`` (built under ``presets[0]``, pads not frozen) switchable between ``presets``,
    in place; returns it. Sites where every preset agrees are left as they are. ``bn`` (one of
    :data:`GRID_BN`): ``statistics``: every BatchNorm2d becomes a :class:`GridBatchNorm2d`, its
    running statistics kept per preset and switched with the pads; ``affine``: its affine weight
    and bias too; ``shared``: BatchNorm left as it is."""
    if bn not in GRID_BN:
        raise ValueError(f"unknown grid BatchNorm {bn!r}; choose one of {', '.join(GRID_BN)}")
    paddings = grid_paddings(presets)
    if model.meta.padding != paddings[0]:
        raise ValueError(
            f"the model is built under {model.meta.padding_name}; build it under {presets[0]}, the grid's first preset"
        )
    sites = {"stem_conv": [p.stem_conv for p in paddings], "block_conv": [p.block_conv for p in paddings],
             "stem_pool": [p.stem_pool for p in paddings]}  # fmt: skip
    if len(set(sites["stem_conv"])) > 1:
        model.conv1 = GridConv2d.like(model.conv1, sites["stem_conv"])
    if len(set(sites["stem_pool"])) > 1 and not isinstance(model.maxpool, nn.Identity):
        model.maxpool = GridMaxPool2d(sites["stem_pool"], paddings[0].stem_pool_value)
    if len(set(sites["block_conv"])) > 1:
        for name, module in list(model.named_modules()):
            if name.startswith("layer") and is_strided_conv(module):
                model.set_submodule(name, GridConv2d.like(module, sites["block_conv"]))
    if bn != "shared":
        for name, module in list(model.named_modules()):
            if type(module) is nn.BatchNorm2d:
                model.set_submodule(name, GridBatchNorm2d.like(module, len(paddings), affine_per_preset=bn == "affine"))
    model.grid = tuple(presets)
    # the switchable sites, found once here: set_grid runs before every training step
    model.grid_sites = tuple(m for m in model.modules() if isinstance(m, (GridConv2d, GridMaxPool2d, GridBatchNorm2d)))
    return model


def set_grid(model: nn.Module, preset: int | str) -> None:
    """Run ``model`` (made by :func:`make_grid`) under ``preset``: its index in the grid, or its name."""
    index = preset if isinstance(preset, int) else model.grid.index(preset)
    for site in model.grid_sites:
        site.active = index


def grid_name(presets: Sequence[str]) -> str:
    """How result rows name weights trained for several presets: ``grid[symmetric,asymmetric]``,
    the ``train.py grid=`` value that made them."""
    return f"grid[{','.join(presets)}]"


def grid_members(name: str) -> tuple[str, ...]:
    """The presets of a :func:`grid_name` (``()`` for any other name)."""
    return tuple(name[5:-1].split(",")) if name.startswith("grid[") and name.endswith("]") else ()


def draw(seed: int, step: int, count: int) -> int:
    """The preset index of optimizer step ``step``: uniform, a function of (seed, step) alone."""
    return int(torch.randint(count, (), generator=torch.Generator().manual_seed(seed * 1_000_003 + step)))


def alternate(seed: int, step: int, count: int) -> int:
    """A schedule of :func:`draw`'s signature: the presets in turn (step + seed) mod ``count``, so
    that every stretch of steps gives each preset its share."""
    return (step + seed) % count


GRID_BN_KEYS = (
    "grid_running_mean",
    "grid_running_var",
    "grid_num_batches_tracked",
    "grid_weight_offset",
    "grid_bias_offset",
)


def has_grid_bn(state: Mapping[str, torch.Tensor]) -> bool:
    """Whether a state dict holds per-grid BatchNorm statistics (``make_grid(bn="statistics")`` or ``"affine"``)."""
    return bool(_grid_norms(state))


def grid_bn_of(state: Mapping[str, torch.Tensor]) -> str:
    """What a state dict's BatchNorms keep per preset (one of :data:`GRID_BN`), read from its keys."""
    if not has_grid_bn(state):
        return "shared"
    return "affine" if any(key.rpartition(".")[2] == "grid_weight_offset" for key in state) else "statistics"


def _grid_norms(state: Mapping[str, torch.Tensor]) -> set[str]:
    """The module names of a state dict's per-grid BatchNorms (those with ``grid_running_mean``)."""
    return {key.rpartition(".")[0] for key in state if key.rpartition(".")[2] == "grid_running_mean"}


def preset_state_dict(state: Mapping[str, torch.Tensor], preset: int) -> dict[str, torch.Tensor]:
    """A plain model's state dict from a per-grid-BN one: every BatchNorm's running mean, var and
    batch count (and with per-grid affine, weight and bias) are those of the grid's ``preset`` (its
    index), their ``grid_*`` keys dropped. A state dict without per-grid statistics comes back as
    it is (a copy of the mapping)."""
    norms = _grid_norms(state)
    plain = {
        key: value
        for key, value in state.items()
        if not (key.rpartition(".")[0] in norms and key.rpartition(".")[2] in GRID_BN_KEYS)
    }
    if preset == 0:
        return plain
    for prefix in norms:  # each key is in plain already: the order of the entries stays the state's
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            plain[f"{prefix}.{name}"] = state[f"{prefix}.grid_{name}"][preset - 1].clone()
        for param in ("weight", "bias"):  # with per-grid affine: preset 0's plus the preset's offset
            offset = state.get(f"{prefix}.grid_{param}_offset")
            if offset is not None:
                plain[f"{prefix}.{param}"] = state[f"{prefix}.{param}"] + offset[preset - 1]
    return plain


def preset_norms(state: Mapping[str, torch.Tensor], presets: Sequence[str]) -> dict[str, dict[str, torch.Tensor]]:
    """Each preset's BatchNorm entries from a per-grid-BN state dict, by preset name
    (:attr:`resnet.padding.Padding.name`): running statistics, and weight and bias with per-grid
    affine; what :func:`use_preset_norms` loads into a plain model run under that preset. Empty
    for a state dict without per-grid BatchNorm."""
    if not has_grid_bn(state):
        return {}
    norms = _grid_norms(state)
    return {
        resolve_padding(name).name: {key: value for key, value in preset_state_dict(state, index).items()
                                     if key.rpartition(".")[0] in norms}
        for index, name in enumerate(presets)
    }  # fmt: skip


def use_preset_norms(model: nn.Module, norms: Mapping[str, Mapping[str, torch.Tensor]]) -> nn.Module:
    """``model`` (a plain model, run under ``model.meta.padding_name``) with that preset's
    BatchNorm entries from :func:`preset_norms`, assigned, not copied: a model sharing its tensors
    (:func:`resnet.model.with_padding`) keeps its own. A scheme outside the grid keeps what the
    model holds (the grid's first preset's). Returns ``model``."""
    chosen = norms.get(model.meta.padding_name)
    if chosen:
        device = next(model.parameters()).device  # the entries come from the file, on the CPU
        chosen = {key: value.to(device) for key, value in chosen.items()}
        unexpected = model.load_state_dict(chosen, strict=False, assign=True).unexpected_keys
        if unexpected:  # entries of another architecture: refuse rather than run half-loaded
            raise ValueError(
                f"the per-preset BatchNorm entries do not fit this {model.meta.arch} "
                f"({len(unexpected)} unexpected keys, e.g. {unexpected[0]})"
            )
    return model
