"""Padding schemes per site, decided when a layer is built.

The domain is docs/padding.md. A :class:`Padding` names one scheme per *site* (and, per
strided site, whether a BlurPool downsamples instead). :func:`make_conv` and
:func:`make_max_pool` turn a scheme into a layer once, at build time:

* a scheme whose pad is the same symmetric pad for every input size becomes a
  plain ``nn.Conv2d`` / ``nn.MaxPool2d`` with that ``padding``;
* a fixed asymmetric pad becomes :class:`PadConv2d` / :class:`PadMaxPool2d`;
* only TF 'SAME' at stride > 1 depends on the input size, and only those layers
  (:class:`SameConv2d`, :class:`SameMaxPool2d`) compute their pad in ``forward``.
  :func:`freeze_padding` replaces them with static layers for one input size;
* at a blurred site the op runs at stride 1, padded symmetrically, and timm's ``BlurPool2d``
  (:func:`blur_pool`) subsamples: after the activation that follows a conv (the model and
  its blocks hold it, as ``stem_aa`` / ``aa``), right after the stem pool
  (:class:`BlurMaxPool2d`). Its filter is a non-persistent buffer: no state-dict key appears.

What a built layer pads is asked of it in one place, :func:`layer_pad`, which every other
module asks: a new scheme is a layer here that answers (``applied_pad``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call
from torch.nn.modules.utils import _pair

CONV_SCHEMES = ("symmetric", "same", "fixed", "valid")
POOL_SCHEMES = ("symmetric", "same", "ceil", "valid")
POOL_PAD_VALUES = ("-inf", "zero")
BLUR_SITES = ("stem_conv_blur", "stem_pool_blur", "block_conv_blur")  # booleans: a BlurPool downsamples there
BLUR_FILTER_SIZE = 3  # the binomial [1, 2, 1] filter of Zhang (2019) and timm's ResNet aa_layer

Pad2d = tuple[int, int, int, int]  # (left, right, top, bottom), the order F.pad takes
# What padded cells hold: a constant ("zero", "-inf": a max pool ignores the cell) or a copy of the
# input (F.pad's modes). A conv can run on the constant zero and on the copies (torch's padding_mode).
PAD_MODES = ("zero", "-inf", "reflect", "replicate", "circular")
CONV_PAD_MODES = ("zero", "reflect", "replicate", "circular")


class UnknownScheme(ValueError):
    """A site given a scheme it does not have; ``site`` and ``choices`` let a caller add a hint in
    its own terms (a config override, a keyword argument)."""

    def __init__(self, site: str, value: object, choices: tuple[str, ...]):
        super().__init__(f"unknown {site} scheme {value!r}; choose one of {', '.join(choices)}")
        self.site, self.value, self.choices = site, value, choices


class NotABool(UnknownScheme):
    """A blur site given something other than true / false."""

    def __init__(self, site: str, value: object):
        ValueError.__init__(self, f"padding.{site} must be true or false, not {value!r}")
        self.site, self.value, self.choices = site, value, ("true", "false")


@dataclass(frozen=True)
class Padding:
    """One scheme per site. Field names are the keys of configs and result rows.

    A ``*_blur`` site (default off) is anti-aliased as the module docstring says: there the site's
    scheme no longer places the output grid; the BlurPool's own pad does. The pool keeps ``stem_pool_value``.
    """

    stem_conv: str = "symmetric"
    stem_pool: str = "symmetric"
    stem_pool_value: str = "-inf"
    block_conv: str = "symmetric"
    stem_conv_blur: bool = False
    stem_pool_blur: bool = False
    block_conv_blur: bool = False

    def __post_init__(self) -> None:
        for site, value, choices in (
            ("stem_conv", self.stem_conv, CONV_SCHEMES),
            ("stem_pool", self.stem_pool, POOL_SCHEMES),
            ("stem_pool_value", self.stem_pool_value, POOL_PAD_VALUES),
            ("block_conv", self.block_conv, CONV_SCHEMES),
        ):
            if value not in choices:
                raise UnknownScheme(site, value, choices)
        for site in BLUR_SITES:
            if not isinstance(getattr(self, site), bool):
                raise NotABool(site, getattr(self, site))
        if self.stem_pool == "ceil" and self.stem_pool_value == "zero":
            raise ValueError(
                "stem_pool=ceil clips its windows to the image, so a 'zero' pad value has no "
                "meaning there; use stem_pool_value=-inf, or stem_pool=same with stem_pool_value=zero"
            )

    def as_dict(self) -> dict[str, str | bool]:
        """The sites as plain data (checkpoints, result rows, ONNX metadata). A blur site is
        written only when on: a file of an unblurred scheme stays what versions before the
        blur sites wrote, and read."""
        return {site: value for site, value in asdict(self).items() if site not in BLUR_SITES or value}

    @property
    def blurred(self) -> tuple[str, ...]:
        """The sites a BlurPool downsamples, in site order, without ``_blur``: ``("block_conv",)``."""
        return tuple(site.removesuffix("_blur") for site in BLUR_SITES if getattr(self, site))

    @property
    def name(self) -> str:
        """The canonical name, which says what each site got and which :func:`resolve_padding`
        reads back: the nearest preset (fewest scheme sites apart; the first in :data:`PRESETS`
        order on a tie), the sites where this one departs from it in brackets, the blurred
        sites last: ``asymmetric``, ``tf_same[stem_pool=symmetric]``,
        ``symmetric[block_conv=same]+blur(block_conv)``. Two different schemes never share one."""
        preset, changed = self.departures()
        sites = f"[{','.join(f'{site}={value}' for site, value in changed.items())}]" if changed else ""
        blurred = f"+blur({','.join(self.blurred)})" if self.blurred else ""
        return f"{preset}{sites}{blurred}"

    def departures(self) -> tuple[str, dict[str, str]]:
        """The nearest preset and the scheme sites (in site order) where this one differs from it:
        ``("tf_same", {"stem_pool": "symmetric"})``. Blur sites are not among them (:attr:`blurred`)."""

        def changed(preset: Padding) -> dict[str, str]:
            return {site: getattr(self, site) for site in SCHEME_SITES if getattr(self, site) != getattr(preset, site)}

        nearest = min(PRESETS, key=lambda preset: len(changed(PRESETS[preset])))  # min keeps the first of a tie
        return nearest, changed(PRESETS[nearest])


# docs/padding.md, "Presets". "asymmetric" is TensorNets' Case 1: only the
# stem follows TF 'SAME'; blocks keep the model's native (symmetric) explicit pads.
PRESETS: dict[str, Padding] = {
    "symmetric": Padding("symmetric", "symmetric", "-inf", "symmetric"),
    "asymmetric": Padding("same", "same", "-inf", "symmetric"),
    "tf_same": Padding("same", "same", "-inf", "same"),
    "tf_slim": Padding("fixed", "same", "-inf", "fixed"),
    "caffe": Padding("symmetric", "ceil", "-inf", "symmetric"),
    "keras": Padding("symmetric", "symmetric", "zero", "symmetric"),
}

SITES = tuple(f.name for f in fields(Padding))
SCHEME_SITES = tuple(site for site in SITES if site not in BLUR_SITES)  # the sites a name's brackets set
# Padding.name: <preset>[<site>=<scheme>,...]+blur(<sites>), the brackets and the blur optional
SCHEME_NAME = re.compile(r"(?P<preset>[^\[\]+()]+)(\[(?P<sites>[^\]]*)\])?(\+blur\((?P<blurred>[^()]*)\))?")


def resolve_padding(spec: str | Mapping | Padding | None, native: str | Padding = "symmetric") -> Padding:
    """A preset name, a per-site mapping or a Padding -> Padding.

    A name is a preset or :attr:`Padding.name`'s ``<preset>+blur(<sites>)``. A mapping may
    name a base ``preset`` and override single sites, e.g. ``{"preset": "symmetric",
    "stem_pool": "same", "block_conv_blur": True}``; sites it leaves out come from that
    preset, or from ``native`` (the model's own preset or scheme) when it names none.
    A blur site takes a bool (the strings ``true`` / ``false`` too).
    """
    if spec is None:
        spec = native
    if isinstance(spec, Padding):
        return spec
    if isinstance(spec, str):
        return _parse_name(spec)
    if isinstance(spec, Mapping):
        overrides = {k: v for k, v in spec.items() if v is not None}
        value = overrides.get("stem_pool_value")
        if isinstance(value, float):  # a command line's -inf / 0 arrive as numbers
            overrides["stem_pool_value"] = {-math.inf: "-inf", 0.0: "zero"}.get(value, str(value))
        for site in BLUR_SITES:  # a quoted or programmatic "true" / "false"
            if isinstance(overrides.get(site), str) and overrides[site].strip().lower() in ("true", "false"):
                overrides[site] = overrides[site].strip().lower() == "true"
        base = resolve_padding(overrides.pop("preset", None) or overrides.pop("name", None) or native)
        unknown = sorted(set(overrides) - set(SITES))
        if unknown:
            raise ValueError(
                f"unknown padding site(s) {', '.join(unknown)}; the sites are {', '.join(SITES)} "
                "(and 'preset' for the base preset)"
            )
        return replace(base, **overrides)
    raise TypeError(f"padding must be a preset name, a mapping of sites or a Padding, not {type(spec)}")


def _parse_name(name: str) -> Padding:
    """A :attr:`Padding.name` (or one with its sites in another order, or from another base
    preset) -> Padding."""
    parsed = SCHEME_NAME.fullmatch(name.strip())
    if parsed is None or parsed["preset"] not in PRESETS:
        if name == "custom":  # what rows named a per-site scheme before names said its sites
            raise ValueError(
                "'custom' names no one scheme; name its sites after a preset, e.g. symmetric[stem_pool=same] "
                "(Padding.name), or pass the sites as +padding.<site>=<scheme>"
            )
        preset = parsed["preset"] if parsed else name
        raise ValueError(
            f"unknown padding preset {preset!r}; choose one of {', '.join(PRESETS)} "
            f"(e.g. +padding={next(iter(PRESETS))})"
        )
    sites = {}
    for item in filter(None, (part.strip() for part in (parsed["sites"] or "").split(","))):
        site, equals, scheme = item.partition("=")
        if site.strip() not in SCHEME_SITES or not equals:
            raise ValueError(
                f"{item!r} in {name!r} is not <site>=<scheme>; the sites are {', '.join(SCHEME_SITES)}, "
                "e.g. symmetric[stem_pool=same]"
            )
        sites[site.strip()] = scheme.strip()
    blurred = [site.strip() for site in (parsed["blurred"] or "").split(",")] if parsed["blurred"] is not None else []
    unknown = [repr(site) for site in blurred if f"{site}_blur" not in BLUR_SITES]
    if unknown:
        choices = ", ".join(site.removesuffix("_blur") for site in BLUR_SITES)
        raise ValueError(f"unknown blur site(s) {', '.join(unknown)} in {name!r}; the sites are {choices}")
    changed = {**sites, **{f"{site}_blur": True for site in blurred}}
    return replace(PRESETS[parsed["preset"]], **changed) if changed else PRESETS[parsed["preset"]]


# --- formulas (docs/padding.md, "Convolution schemes") ---------------------------------


def effective_kernel(k: int, d: int = 1) -> int:
    return (k - 1) * d + 1


def same_pad(n: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    """TF 'SAME': out = ceil(n / s); the odd pixel goes after (bottom/right)."""
    out = -(-n // s)
    total = max((out - 1) * s + effective_kernel(k, d) - n, 0)
    return total // 2, total - total // 2


def fixed_pad(k: int, s: int = 2, d: int = 1) -> tuple[int, int]:
    """TF official ``fixed_padding`` / TF-slim ``conv2d_same``: independent of n.

    At stride 1 TF-slim uses 'SAME', which at s = 1 is this same total.
    """
    total = effective_kernel(k, d) - 1
    return total // 2, total - total // 2


def conv_pad(scheme: str, n: int | None, k: int, s: int, d: int = 1) -> tuple[int, int]:
    """(before, after) of a conv scheme along one axis; ``n`` is needed only for 'same'."""
    if scheme == "symmetric":
        p = effective_kernel(k, d) // 2
        return p, p
    if scheme == "fixed":
        return fixed_pad(k, s, d)
    if scheme == "valid":
        return 0, 0
    if scheme == "same":
        if n is None:
            raise ValueError("'same' padding needs the input size")
        return same_pad(n, k, s, d)
    raise ValueError(f"unknown conv scheme {scheme!r}; choose one of {', '.join(CONV_SCHEMES)}")


# --- what a built layer pads ------------------------------------------------------


@dataclass(frozen=True)
class AppliedPad:
    """The pad one layer applies to an input of one size: cells added per side, and what they
    hold (one of :data:`PAD_MODES`). Where the layer pads implicitly (a conv's ``padding``, a
    ceil-mode pool's clipped windows), this is the explicit pad that gives the same output."""

    top: int
    bottom: int
    left: int
    right: int
    mode: str = "zero"

    def __post_init__(self) -> None:
        if self.mode not in PAD_MODES:
            raise ValueError(f"unknown pad mode {self.mode!r}; the modes are {', '.join(PAD_MODES)}")

    @classmethod
    def of(cls, pad_h: tuple[int, int], pad_w: tuple[int, int], mode: str = "zero") -> AppliedPad:
        """From (top, bottom) and (left, right)."""
        return cls(pad_h[0], pad_h[1], pad_w[0], pad_w[1], mode)

    @classmethod
    def from_f_pad(cls, pad: Pad2d, mode: str = "zero") -> AppliedPad:
        """From F.pad's (left, right, top, bottom)."""
        left, right, top, bottom = pad
        return cls(top, bottom, left, right, mode)

    @property
    def h(self) -> tuple[int, int]:
        return self.top, self.bottom

    @property
    def w(self) -> tuple[int, int]:
        return self.left, self.right

    @property
    def f_pad(self) -> Pad2d:
        """(left, right, top, bottom), the order F.pad takes."""
        return self.left, self.right, self.top, self.bottom

    @property
    def symmetric(self) -> bool:
        """The same before as after along each axis (a conv's or pool's own ``padding`` can apply it)."""
        return self.top == self.bottom and self.left == self.right


def layer_pad(module: nn.Module, input_hw: tuple[int, int]) -> AppliedPad:
    """What ``module`` pads an ``input_hw`` (H, W) input by, and with what: the one place that says.

    A layer of this project answers itself (its ``applied_pad``); the plain modules the builder
    makes, torch's conv and max pool and timm's BlurPool2d, are answered here."""
    own = getattr(module, "applied_pad", None)
    if own is not None:
        return own(tuple(input_hw))
    h, w = input_hw
    if is_blur_pool(module):  # timm's BlurPool2d: F.pad(x, padding, mode=pad_mode)
        return AppliedPad.from_f_pad(tuple(module.padding), module.pad_mode)
    if isinstance(module, nn.Conv2d):
        if isinstance(module.padding, str):
            raise ValueError(f"{module} pads by the name {module.padding!r}; the builder gives a conv its pad in cells")
        (ph, pw), mode = module.padding, "zero" if module.padding_mode == "zeros" else module.padding_mode
        return AppliedPad(ph, ph, pw, pw, mode)
    if isinstance(module, nn.MaxPool2d):  # torch pads a max pool with -inf; ceil mode reads past the image
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = map(
            _pair, (module.kernel_size, module.stride, module.padding, module.dilation)
        )
        if not module.ceil_mode:
            return AppliedPad(ph, ph, pw, pw, "-inf")
        return AppliedPad.of(
            (ph, _ceil_mode_after(h, effective_kernel(kh, dh), sh, ph)),
            (pw, _ceil_mode_after(w, effective_kernel(kw, dw), sw, pw)),
            "-inf",
        )
    raise TypeError(
        f"{type(module).__name__} is not a padding layer: no applied_pad, and not a conv, max pool or BlurPool2d"
    )


def is_strided_conv(module: nn.Module) -> bool:
    """A conv whose padding a site decides: stride > 1 and kernel > 1 (a 1x1/2 shortcut never pads)."""
    return isinstance(module, nn.Conv2d) and max(module.stride) > 1 and max(module.kernel_size) > 1


def pad_at_any_size(module: nn.Module) -> AppliedPad | None:
    """``module``'s pad where it is the same at every input size (fixed when the layer was built);
    None where it follows the size (SAME, a ceil-mode pool): ask :func:`layer_pad` per input then."""
    if getattr(module, "pads_by_size", False) or (isinstance(module, nn.MaxPool2d) and module.ceil_mode):
        return None
    return layer_pad(module, (1, 1))


def _ceil_mode_after(n: int, k: int, s: int, p: int) -> int:
    """Cells a ceil-mode pool reads past the image (clipped windows), as an after-pad."""
    out = _torch_pool_len(n, k, s, p, ceil_mode=True)
    return max((out - 1) * s + k - n - p, p)


def value_mode(value: float) -> str:
    """The mode of a constant pad value: -inf or 0 (the inverse of :func:`pad_value`)."""
    if value == -math.inf:
        return "-inf"
    if value == 0:
        return "zero"
    raise ValueError(f"a pool pads with -inf or 0, not {value}")


_FILLS = {"zero": 0.0, "-inf": -math.inf}  # the constant modes


def pad_input(x: torch.Tensor, pad: AppliedPad) -> torch.Tensor:
    """``x`` padded as ``pad`` says: with its constant, or with copies of ``x``'s cells."""
    if pad.mode in _FILLS:
        return F.pad(x, pad.f_pad, value=_FILLS[pad.mode])
    return F.pad(x, pad.f_pad, mode=pad.mode)


# --- layers ------------------------------------------------------------------------


class PadConv2d(nn.Conv2d):
    """A conv on an explicitly padded input: a pad fixed at build time that torch's
    symmetric ``padding`` cannot express (or that ONNX should see as a Pad op)."""

    def __init__(self, *args, pad: Pad2d, **kwargs) -> None:
        super().__init__(*args, padding=0, **kwargs)
        self.pad = tuple(pad)

    def applied_pad(self, input_hw: tuple[int, int]) -> AppliedPad:
        return AppliedPad.from_f_pad(self.pad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, self.pad))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, pad={self.pad}"


class SameConv2d(nn.Conv2d):
    """TF 'SAME' conv at stride > 1: the pad follows each input's size (:func:`conv_with_pads`)."""

    pads_by_size = True  # pad_at_any_size: SAME's pad follows each input's size

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, padding=0, **kwargs)  # a padding of its own is refused (TypeError)

    def applied_pad(self, input_hw: tuple[int, int]) -> AppliedPad:
        """SAME's pads for this input size, per dimension."""
        (h, w), (kh, kw), (sh, sw), (dh, dw) = input_hw, self.kernel_size, self.stride, self.dilation
        return AppliedPad.of(same_pad(h, kh, sh, dh), same_pad(w, kw, sw, dw))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return conv_with_pads(self, x, self.applied_pad(x.shape[-2:]))


def conv_with_pads(conv: nn.Conv2d, x: torch.Tensor, pad: AppliedPad) -> torch.Tensor:
    """``conv``'s weights applied to ``x`` padded as ``pad`` says: where the pad is symmetric
    zeros the conv pads itself, so no copy of the input is made."""
    if pad.mode not in CONV_PAD_MODES:
        raise ValueError(
            f"a conv cannot run on cells padded with {pad.mode!r}; it pads with one of {', '.join(CONV_PAD_MODES)}"
        )
    if pad.mode == "zero" and pad.symmetric:
        return F.conv2d(x, conv.weight, conv.bias, conv.stride, (pad.top, pad.left), conv.dilation, conv.groups)
    return F.conv2d(pad_input(x, pad), conv.weight, conv.bias, conv.stride, 0, conv.dilation, conv.groups)


class PadMaxPool2d(nn.MaxPool2d):
    """Max pool on an input padded with a constant fixed at build time (Keras pads
    with zeros before a 'valid' pool; docs/padding.md, "Pooling")."""

    def __init__(self, kernel_size: int, stride: int, pad: Pad2d, value: float) -> None:
        super().__init__(kernel_size, stride, padding=0)
        self.pad = tuple(pad)
        self.value = value

    def applied_pad(self, input_hw: tuple[int, int]) -> AppliedPad:
        return AppliedPad.from_f_pad(self.pad, value_mode(self.value))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, self.pad, value=self.value))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, pad={self.pad}, value={self.value}"


def _torch_pool_len(n: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    """Output length of torch's max pool (aten's pooling_output_shape)."""
    span = n + 2 * p - k
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _ceil_mode_args(h: int, w: int, k: int, s: int, pad: AppliedPad) -> tuple[int, bool] | None:
    """(padding, ceil_mode) of torch's own pool that equals a -inf SAME pool at this size, or None.

    -inf cells are ignored, so where torch's ceil mode with padding ``before`` yields
    SAME's ceil(n / s) windows it samples the same grid, with no padded copy.
    """
    if pad.top != pad.left or pad.bottom != pad.right or pad.top > k // 2:
        return None
    ceil = pad.bottom > pad.top
    if all(_torch_pool_len(n, k, s, pad.top, ceil) == -(-n // s) for n in (h, w)):
        return pad.top, ceil
    return None


class SameMaxPool2d(nn.MaxPool2d):
    """TF 'SAME' max pool; the pad value is -inf (TF ignores padded cells) or 0 (Keras)."""

    pads_by_size = True  # pad_at_any_size: SAME's pad follows each input's size

    def __init__(self, kernel_size: int, stride: int, value: float = -math.inf) -> None:
        super().__init__(kernel_size, stride, padding=0)
        self.value = value

    def applied_pad(self, input_hw: tuple[int, int]) -> AppliedPad:
        """SAME's pads for this input size, per dimension."""
        (h, w), k, s = input_hw, self.kernel_size, self.stride
        return AppliedPad.of(same_pad(h, k, s), same_pad(w, k, s), value_mode(self.value))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, s = self.kernel_size, self.stride
        h, w = x.shape[-2:]
        pad = self.applied_pad((h, w))
        if pad.mode == "-inf":
            args = _ceil_mode_args(h, w, k, s, pad)
            if args is not None:
                return F.max_pool2d(x, k, s, args[0], ceil_mode=args[1])
        return F.max_pool2d(pad_input(x, pad), k, s)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, value={self.value}"


def blur_pool(channels: int | None, stride: int) -> nn.Module:
    """timm's ``BlurPool2d`` (Zhang 2019): a 3x3 binomial low-pass, reflect-padded by 1, at ``stride``.

    Its filter is a non-persistent buffer, so it adds no state-dict key. timm is imported
    here, on first use: importing it costs seconds, and most models have no blurred site.
    """
    from timm.layers import BlurPool2d

    return BlurPool2d(channels, filt_size=BLUR_FILTER_SIZE, stride=stride)


def is_blur_pool(module: nn.Module) -> bool:
    """Whether ``module`` is a BlurPool2d (told without importing timm)."""
    return type(module).__name__ == "BlurPool2d" and hasattr(module, "filt")


class BlurMaxPool2d(nn.MaxPool2d):
    """The stem max pool made anti-aliased: the pool at stride 1, padded ``pad`` each side with
    ``value``, then ``blur`` subsamples by ``blur_stride`` (timm's ``aa_layer`` stem pool)."""

    def __init__(self, kernel_size: int, pad: int, value: float, channels: int | None, blur_stride: int) -> None:
        implicit = value == -math.inf or pad == 0  # torch's own pool padding is -inf
        super().__init__(kernel_size, 1, padding=pad if implicit else 0)
        self.pad = None if implicit else (pad,) * 4
        self.value = value
        self.blur = blur_pool(channels, blur_stride)

    def applied_pad(self, input_hw: tuple[int, int]) -> AppliedPad:
        """The stride-1 pool's pad (``blur``, the BlurPool2d, answers for its own)."""
        return AppliedPad.from_f_pad(self.pad or (self.padding,) * 4, value_mode(self.value))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pad is not None:
            x = F.pad(x, self.pad, value=self.value)
        return self.blur(super().forward(x))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, value={self.value}, blur_stride={self.blur.stride}"


def init_blur_filters(model: nn.Module) -> nn.Module:
    """Fill the filter of every BlurPool left on the meta device (a model built there, then given
    its tensors with ``load_state_dict(assign=True)``: the filter is no state-dict entry, so
    nothing assigns it), on the device and in the dtype of the model's parameters. A model
    still wholly on the meta device is left as it is. Returns ``model``."""
    ref = next((p for p in model.parameters() if not p.is_meta), None)
    if ref is None:
        return model
    for module in model.modules():
        if is_blur_pool(module) and module.filt.is_meta:
            with torch.device("cpu"):
                fresh = type(module)(module.channels, filt_size=module.filt_size, stride=module.stride)
            module.filt = fresh.filt.to(device=ref.device, dtype=ref.dtype)
    return model


def _static_conv(*args, pad: AppliedPad, **kwargs) -> nn.Conv2d:
    if pad.symmetric:
        return nn.Conv2d(*args, padding=(pad.top, pad.left), **kwargs)
    return PadConv2d(*args, pad=pad.f_pad, **kwargs)


def make_conv(
    scheme: str,
    in_ch: int,
    out_ch: int,
    kernel_size: int,
    stride: int = 1,
    groups: int = 1,
    bias: bool = False,
    dilation: int = 1,
) -> nn.Conv2d:
    """Build a conv whose padding follows ``scheme``; the decision is made here, once."""
    args = (in_ch, out_ch, kernel_size)
    kwargs = dict(stride=stride, groups=groups, bias=bias, dilation=dilation)
    # SAME's total pad is k_eff - s + ((-n) mod s)-ish: at stride 1 or for a 1x1, k_eff - 1 whatever n is (fixed)
    if scheme == "same" and stride > 1 and effective_kernel(kernel_size, dilation) > 1:
        return SameConv2d(*args, **kwargs)
    pad = conv_pad("fixed" if scheme == "same" else scheme, None, kernel_size, stride, dilation)
    return _static_conv(*args, pad=AppliedPad.of(pad, pad), **kwargs)


def pad_value(name: str) -> float:
    if name not in POOL_PAD_VALUES:
        raise ValueError(f"unknown pool pad value {name!r}; choose one of {', '.join(POOL_PAD_VALUES)}")
    return -math.inf if name == "-inf" else 0.0


def make_max_pool(
    scheme: str,
    value: str = "-inf",
    kernel_size: int = 3,
    stride: int = 2,
    blur: bool = False,
    channels: int | None = None,
) -> nn.Module:
    """Build the stem max pool for ``scheme`` padded with ``value`` ('-inf' or 'zero').

    ``blur`` (at ``stride`` > 1): a :class:`BlurMaxPool2d`, the pool at stride 1 padded
    k // 2 each side with ``value`` (``scheme`` places no grid there), then a BlurPool2d
    over ``channels`` (None: as many as it is given) at ``stride``."""
    fill = pad_value(value)
    if scheme not in POOL_SCHEMES:
        raise ValueError(f"unknown pool scheme {scheme!r}; choose one of {', '.join(POOL_SCHEMES)}")
    if blur and stride > 1:
        return BlurMaxPool2d(kernel_size, kernel_size // 2, fill, channels, stride)
    if scheme == "same":
        return SameMaxPool2d(kernel_size, stride, fill)
    if scheme in ("ceil", "valid"):  # ceil: Caffe's pad 0, ceil mode, windows clipped to the image
        return nn.MaxPool2d(kernel_size, stride, padding=0, ceil_mode=scheme == "ceil")
    p = kernel_size // 2
    if fill == -math.inf:  # torch's pool padding is implicitly -inf
        return nn.MaxPool2d(kernel_size, stride, padding=p)
    return PadMaxPool2d(kernel_size, stride, (p, p, p, p), fill)


def freeze_padding(model: nn.Module, input_size: int | tuple[int, int], explicit: bool = False) -> nn.Module:
    """Replace every size-dependent layer by a static one, for one input size.

    Runs one dummy forward on the meta device to learn each layer's input size,
    so nothing is computed. Parameters are kept (same tensors, same state-dict
    keys). Returns ``model``, changed in place.

    ``explicit=False`` (for speed) keeps a -inf SAME pool as torch's ceil-mode pool where
    that samples the same grid (no padded copy); ``explicit=True`` (for export) always
    writes the pad out, so an ONNX graph shows it as a Pad op.
    """
    dynamic = {name: m for name, m in model.named_modules() if isinstance(m, (SameConv2d, SameMaxPool2d))}
    if "" in dynamic:
        raise ValueError(f"freeze_padding takes a model holding such layers, not a {type(model).__name__} itself")
    sizes = input_sizes(model, dynamic, input_size)
    for name, layer in dynamic.items():
        model.set_submodule(name, _frozen(layer, *sizes[name], explicit))
    return model


def input_sizes(
    model: nn.Module, layers: Mapping[str, nn.Module], input_size: int | tuple[int, int]
) -> dict[str, tuple[int, int]]:
    """The (H, W) each of ``layers`` (name -> module of ``model``) first sees for one input
    size, in forward order. Runs on the meta device: nothing is computed or allocated."""
    h, w = (input_size, input_size) if isinstance(input_size, int) else input_size
    sizes: dict[str, tuple[int, int]] = {}

    def record(name: str):
        def hook(module: nn.Module, args: tuple) -> None:
            sizes.setdefault(name, tuple(args[0].shape[-2:]))

        return hook

    hooks = [m.register_forward_pre_hook(record(name)) for name, m in layers.items()]
    modes = {m: m.training for m in model.modules()}
    model.eval()  # batch 1 in train mode would fail BatchNorm wherever a map is 1x1
    in_chans = next(m for m in model.modules() if isinstance(m, nn.Conv2d)).in_channels
    dtype = next(model.parameters()).dtype
    # every tensor, non-persistent buffers (a BlurPool's filter) included
    tensors = [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]
    state = {k: torch.empty_like(v, device="meta") for k, v in tensors}
    try:
        with torch.no_grad():
            functional_call(model, state, (torch.empty(1, in_chans, h, w, device="meta", dtype=dtype),))
    finally:
        for hook in hooks:
            hook.remove()
        for m, training in modes.items():
            m.training = training
    return sizes


def conv_like(make: Callable[..., nn.Conv2d], conv: nn.Conv2d, **kwargs) -> nn.Conv2d:
    """``make``'s conv (a conv class, or a builder taking its arguments) of ``conv``'s shape, holding
    ``conv``'s parameters (the same tensors); ``kwargs`` go to ``make`` (its padding)."""
    with torch.device("meta"):  # nothing allocated: the tensors are assigned below
        new = make(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            stride=conv.stride,
            dilation=conv.dilation,
            groups=conv.groups,
            bias=conv.bias is not None,
            **kwargs,
        )
    new.weight, new.bias = conv.weight, conv.bias
    return new


def _frozen(layer: nn.Module, h: int, w: int, explicit: bool) -> nn.Module:
    pad = layer.applied_pad((h, w))
    if isinstance(layer, SameConv2d):
        return conv_like(_static_conv, layer, pad=pad)
    k, s = layer.kernel_size, layer.stride
    if pad.mode == "-inf":
        if pad.top == pad.bottom == pad.left == pad.right:
            return nn.MaxPool2d(k, s, padding=pad.top)
        args = _ceil_mode_args(h, w, k, s, pad)
        if args is not None and not explicit:
            return nn.MaxPool2d(k, s, padding=args[0], ceil_mode=args[1])
    return PadMaxPool2d(k, s, pad.f_pad, layer.value)
