"""Which pad every strided layer of a model applies at a given input size (``resnet-inspect``).

Each row's pad and mode are the layer's own answer (:func:`resnet.padding.layer_pad`);
this module only finds the strided layers, the size each sees, and lays out the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from .model import build_model
from .padding import input_sizes, is_blur_pool, is_strided_conv, layer_pad


@dataclass(frozen=True)
class PadRow:
    layer: str  # module path, e.g. "layer2.0.conv2"; a BlurPool's: "layer2.0.aa", "stem_aa", "maxpool.blur"
    kind: str  # "conv", "pool" or "blur" (a BlurPool subsampling after its site's stride-1 conv or pool)
    kernel: int
    stride: int
    input_size: tuple[int, int]
    pad_h: tuple[int, int]  # (top, bottom) actually applied
    pad_w: tuple[int, int]  # (left, right)
    value: str  # what padded cells hold, the layer's mode (resnet.padding.PAD_MODES): "zero", "-inf", "reflect"
    site: str  # the strided op's module path (a BlurPool's row: the conv or pool it subsamples for)


def _strided(m: nn.Module) -> bool:
    if is_blur_pool(m):
        return m.stride > 1
    return is_strided_conv(m) or (isinstance(m, nn.MaxPool2d) and m.stride > 1 and m.kernel_size > 1)


def _blur_site(model: nn.Module, name: str) -> str:
    """The op a BlurPool named ``name`` subsamples for: ``stem_aa`` -> ``conv1``,
    ``maxpool.blur`` -> ``maxpool``, ``layer2.0.aa`` -> the block's ``strided_conv``."""
    parent, _, child = name.rpartition(".")
    if child == "stem_aa":
        return "conv1"
    if child == "aa" and parent:
        return f"{parent}.{model.get_submodule(parent).strided_conv}"
    return parent or name


def pad_table(model: nn.Module, input_size: int) -> list[PadRow]:
    """The pad applied by every stride-2 layer with kernel > 1, in forward order (at a blurred
    site: its BlurPool; the op there runs at stride 1, padded symmetrically)."""
    sites = {name: m for name, m in model.named_modules() if _strided(m)}
    seen = input_sizes(model, sites, input_size)
    rows = []
    for name, (h, w) in seen.items():  # insertion order = forward order
        m = sites[name]
        pad = layer_pad(m, (h, w))
        site = name
        if is_blur_pool(m):
            kind, k, s, site = "blur", m.filt_size, m.stride, _blur_site(model, name)
        elif isinstance(m, nn.Conv2d):
            kind, k, s = "conv", m.kernel_size[0], m.stride[0]
        else:
            kind, k, s = "pool", m.kernel_size, m.stride
        rows.append(PadRow(name, kind, k, s, (h, w), pad.h, pad.w, pad.mode, site))
    return rows


_USUAL_MODE = {"conv": "zero", "pool": "-inf"}  # a cell names its mode where it is not the kind's usual one


def _cell(row: PadRow | None) -> str:
    if row is None:  # not a padded stride-2 layer under this scheme (v1's 1x1/2, unblurred)
        return "–"
    if row.kind == "blur":
        return f"blur {row.pad_h} {row.value}"
    return f"{row.pad_h}" + ("" if row.value == _USUAL_MODE[row.kind] else f" {row.value}")


def format_pad_tables(arch: str, sizes: list[int], presets: list[str]) -> str:
    """A Markdown table per input size: rows = strided sites, columns = presets (or blurred
    schemes, ``symmetric+blur(block_conv)``: a blurred site's cell is its BlurPool's pad)."""
    out = []
    for size in sizes:
        models = {p: build_model(arch, padding=p) for p in presets}
        order = {name: i for i, (name, _) in enumerate(models[presets[0]].named_modules())}  # forward order
        tables = {p: {r.site: r for r in pad_table(model, size)} for p, model in models.items()}
        sites = sorted({site for table in tables.values() for site in table}, key=lambda site: order.get(site, -1))
        out.append(f"{arch} at {size}x{size}: (top, bottom) pad of each stride-2 layer\n")
        out.append("| layer | k/s | input | " + " | ".join(presets) + " |")
        out.append("|---" * (3 + len(presets)) + "|")
        for site in sites:
            found = [t[site] for t in tables.values() if site in t]
            row = next((r for r in found if r.kind != "blur"), found[0])  # the op's input, where one is unblurred
            op = models[presets[0]].get_submodule(site)  # a blurred row's kernel is the blur's: show the op's
            k = op.kernel_size[0] if isinstance(op.kernel_size, tuple) else op.kernel_size
            cells = [_cell(tables[p].get(site)) for p in presets]
            out.append(f"| {site} | {k}/{row.stride} | {row.input_size[0]} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)
