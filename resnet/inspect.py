"""Which pad every strided layer of a model applies at a given input size.

``python -m resnet.inspect resnet50 --size 224 299`` prints the pad table of every
preset (docs/padding.md, "ResNet-50 at 224x224") for that architecture.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from torch import nn

from .model import build_model
from .padding import PRESETS, PadConv2d, PadMaxPool2d, SameConv2d, SameMaxPool2d, input_sizes, same_pad


@dataclass(frozen=True)
class PadRow:
    layer: str  # module path, e.g. "layer2.0.conv2"
    kind: str  # "conv" or "pool"
    kernel: int
    stride: int
    input_size: tuple[int, int]
    pad_h: tuple[int, int]  # (top, bottom) actually applied
    pad_w: tuple[int, int]  # (left, right)
    value: str  # what padded cells hold: "zero" or "-inf"


def _ceil_mode_after(n: int, k: int, s: int, p: int) -> int:
    """Cells a ceil-mode pool reads past the image (clipped windows), as an after-pad."""
    out = math.ceil((n + 2 * p - k) / s) + 1
    if (out - 1) * s >= n + p:
        out -= 1
    return max((out - 1) * s + k - n - p, p)


def _applied_pad(m: nn.Module, h: int, w: int) -> tuple[tuple[int, int], tuple[int, int], str]:
    if isinstance(m, SameConv2d):
        pad_h, pad_w = m.pad_for(h, w)
        return pad_h, pad_w, "zero"
    if isinstance(m, PadConv2d):
        left, right, top, bottom = m.pad
        return (top, bottom), (left, right), "zero"
    if isinstance(m, nn.Conv2d):
        ph, pw = m.padding
        return (ph, ph), (pw, pw), "zero"
    value = "zero" if getattr(m, "value", -math.inf) == 0 else "-inf"
    if isinstance(m, SameMaxPool2d):
        return same_pad(h, m.kernel_size, m.stride), same_pad(w, m.kernel_size, m.stride), value
    if isinstance(m, PadMaxPool2d):
        left, right, top, bottom = m.pad
        return (top, bottom), (left, right), value
    k, s, p = m.kernel_size, m.stride, m.padding
    if m.ceil_mode:
        return (p, _ceil_mode_after(h, k, s, p)), (p, _ceil_mode_after(w, k, s, p)), value
    return (p, p), (p, p), value


def _strided_sites(model: nn.Module) -> dict[str, nn.Module]:
    def strided(m: nn.Module) -> bool:
        if isinstance(m, nn.Conv2d):
            return m.stride[0] > 1 and m.kernel_size[0] > 1
        return isinstance(m, nn.MaxPool2d) and m.stride > 1 and m.kernel_size > 1

    return {name: m for name, m in model.named_modules() if strided(m)}


def pad_table(model: nn.Module, input_size: int) -> list[PadRow]:
    """The pad applied by every stride-2 layer with kernel > 1, in forward order."""
    sites = _strided_sites(model)
    seen = input_sizes(model, sites, input_size)
    rows = []
    for name in seen:  # insertion order = forward order
        m = sites[name]
        h, w = seen[name]
        pad_h, pad_w, value = _applied_pad(m, h, w)
        is_conv = isinstance(m, nn.Conv2d)
        k = m.kernel_size[0] if is_conv else m.kernel_size
        s = m.stride[0] if is_conv else m.stride
        rows.append(PadRow(name, "conv" if is_conv else "pool", k, s, (h, w), pad_h, pad_w, value))
    return rows


def format_pad_tables(arch: str, sizes: list[int], presets: list[str]) -> str:
    """A Markdown table per input size: rows = strided layers, columns = presets."""
    out = []
    for size in sizes:
        tables = {p: pad_table(build_model(arch, padding=p), size) for p in presets}
        first = tables[presets[0]]
        out.append(f"{arch} at {size}x{size}: (top, bottom) pad of each stride-2 layer\n")
        out.append("| layer | k/s | input | " + " | ".join(presets) + " |")
        out.append("|---" * (3 + len(presets)) + "|")
        for i, row in enumerate(first):
            cells = []
            for p in presets:
                r = tables[p][i]
                cells.append(f"{r.pad_h}" + (" zero" if r.kind == "pool" and r.value == "zero" else ""))
            out.append(f"| {row.layer} | {row.kernel}/{row.stride} | {row.input_size[0]} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arch", nargs="?", default="resnet50")
    parser.add_argument("--size", type=int, nargs="+", default=[224])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    args = parser.parse_args(argv)
    print(format_pad_tables(args.arch, args.size, args.presets))


if __name__ == "__main__":
    main()
