"""The sampling grid of stride-2 layers, measured on the layers :func:`resnet.padding.make_conv`
builds and drawn (``resnet-figures``): which input pixels each output of a 3x3/2 conv and of a 1x1/2
shortcut reads, under ``symmetric`` and TF ``same`` (docs/padding.md: under SAME at even n the 3x3/2
output i is centred on 2i+1 while the shortcut samples 2i).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .padding import layer_pad, make_conv
from .report.charts import pyplot


@dataclass(frozen=True)
class SamplingGrid:
    """Along one axis: the input indices each output's window covers, padded cells included
    (an index < 0 or >= n is a padded cell)."""

    scheme: str
    n: int
    kernel_size: int
    stride: int
    taps: tuple[tuple[int, ...], ...]  # taps[i] = input indices read by output i
    pad: tuple[int, int]  # (before, after) the layer says it applies (resnet.padding.layer_pad)

    @property
    def reached_pad(self) -> tuple[int, int]:
        """(before, after): the padded cells some window reads; an applied pad cell may go unread."""
        return max(0, -self.taps[0][0]), max(0, self.taps[-1][-1] - (self.n - 1))

    def centre(self, i: int) -> float:
        return sum(self.taps[i]) / len(self.taps[i])

    def reads(self, i: int) -> set[int]:
        return set(self.taps[i])


def sampling_grid(scheme: str, n: int, kernel_size: int, stride: int = 2) -> SamplingGrid:
    """Measure the grid of ``make_conv(scheme, ..., kernel_size, stride)`` on an n x n input.

    Probe: the input holds its own coordinates (row + 1 in channel 0, column + 1 in
    channel 1), and the conv has one output channel per kernel tap with a one-hot kernel,
    so each output channel reads back the coordinate its tap sampled; zero means the tap
    fell on a (zero-)padded cell. Rows and columns must give the same grid.
    """
    k = kernel_size
    conv = make_conv(scheme, 2, 2 * k * k, k, stride, groups=2).double()
    with torch.no_grad():
        conv.weight.zero_()
        for group in range(2):
            for tap in range(k * k):
                conv.weight[group * k * k + tap, 0, tap // k, tap % k] = 1.0
        index = torch.arange(1, n + 1, dtype=torch.float64)
        probe = torch.stack([index.view(n, 1).expand(n, n), index.view(1, n).expand(n, n)])[None]
        read = conv(probe)[0].round().long()  # [2 * k * k, out, out]
    rows = read[: k * k].view(k, k, *read.shape[-2:])  # [tap row, tap col, out_i, out_j]
    cols = read[k * k :].view(k, k, *read.shape[-2:])
    # A padded cell reads 0 in both channels, so take each tap row's code over the tap columns.
    row_taps = [_window(rows[:, :, i, 0].amax(1), n) for i in range(read.shape[-2])]
    col_taps = [_window(cols[:, :, 0, j].amax(0), n) for j in range(read.shape[-1])]
    if row_taps != col_taps:
        raise AssertionError(f"{scheme}: rows and columns are sampled differently: {row_taps} vs {col_taps}")
    grid = SamplingGrid(scheme, n, k, stride, tuple(row_taps), layer_pad(conv, (n, n)).h)
    reached = grid.reached_pad
    if reached[0] != grid.pad[0] or reached[1] > grid.pad[1]:
        raise AssertionError(f"{scheme}: the layer reads pad {reached}, but reports {grid.pad}")
    return grid


def _window(codes: torch.Tensor, n: int) -> tuple[int, ...]:
    """Input indices of one window from the coordinates its taps read (0 = padded cell)."""
    real = [(a, int(c) - 1) for a, c in enumerate(codes) if c > 0]
    if not real:
        raise AssertionError("a window that reads only padding")
    start = real[0][1] - real[0][0]
    taps = tuple(start + a for a in range(len(codes)))
    for a, c in enumerate(codes):  # a tap reads padding exactly when it falls outside the image
        if (c > 0) != (0 <= taps[a] < n) or (c > 0 and c - 1 != taps[a]):
            raise AssertionError(f"taps {list(codes)} are not one contiguous window")
    return taps


def _draw_input(ax, n: int, pad: tuple[int, int], title: str) -> None:
    from matplotlib.patches import Rectangle

    for r in range(-pad[0], n + pad[1]):
        for c in range(-pad[0], n + pad[1]):
            padded = not (0 <= r < n and 0 <= c < n)
            style = dict(facecolor="0.8", hatch="//") if padded else dict(facecolor="white", hatch=None)
            ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, edgecolor="0.6", linewidth=0.6, **style))
    ax.set_xlim(-1.7, n + 0.7)
    ax.set_ylim(n + 0.7, -1.7)  # row 0 at the top, as in an image
    ax.set_aspect("equal")
    ticks = list(range(n))
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.tick_params(labelsize=7)
    ax.set_title(title, fontsize=9)


def _draw_window(ax, grid: SamplingGrid, i: int, j: int, colour: str) -> None:
    from matplotlib.patches import Rectangle

    rows, cols = grid.taps[i], grid.taps[j]
    box = Rectangle((cols[0] - 0.5, rows[0] - 0.5), len(cols), len(rows), fill=False, edgecolor=colour, linewidth=2.5)
    ax.add_patch(box)
    corner = (cols[-1] + 0.5, rows[0] - 0.5)
    ax.annotate(f"out ({i},{j})", corner, fontsize=7, color=colour, ha="right", va="bottom", weight="bold")


def plot_sampling_grid(path: str | Path, n: int = 8, schemes: Sequence[str] = ("symmetric", "same")) -> None:
    """2 x len(schemes) panels: per scheme, the 3x3/2 conv (two windows outlined, every
    output's centre dotted) and the 1x1/2 shortcut (its samples, the 3x3 centres hollow)."""
    plt = pyplot()
    fig, axes = plt.subplots(len(schemes), 2, figsize=(9, 4.4 * len(schemes)), squeeze=False)
    for row, scheme in enumerate(schemes):
        conv3, conv1 = sampling_grid(scheme, n, 3), sampling_grid(scheme, n, 1)
        m = len(conv3.taps)
        centres3 = [conv3.centre(i) for i in range(m)]
        samples1 = [conv1.centre(i) for i in range(len(conv1.taps))]
        ax = axes[row, 0]
        head = f"{scheme}: 3×3/2 conv, pad (before, after) = {conv3.pad}"
        _draw_input(ax, n, conv3.pad, f"{head}\noutput i is centred on input {_formula(centres3)}")
        for c in centres3:
            ax.scatter([c] * m, centres3, s=28, color="tab:blue", zorder=3)
        _draw_window(ax, conv3, 0, 0, "tab:red")
        _draw_window(ax, conv3, m - 1, m - 1, "tab:purple")
        ax = axes[row, 1]
        head = f"{scheme}: 1×1/2 shortcut, pad {conv1.pad}"
        _draw_input(ax, n, conv1.pad, f"{head}\noutput i samples input {_formula(samples1)} (hollow: 3×3/2 centres)")
        for c in centres3:
            ax.scatter([c] * m, centres3, s=90, facecolors="none", edgecolors="tab:blue", zorder=3)
        for c in samples1:
            ax.scatter([c] * len(samples1), samples1, s=40, marker="x", color="tab:green", zorder=4)
        offset = centres3[0] - samples1[0]
        if offset == 0:
            ax.set_xlabel("aligned with the 3×3/2 path", fontsize=8)
        else:
            ax.set_xlabel(f"offset from the 3×3/2 path by {offset:g} pixel in each axis", fontsize=8, color="tab:red")
    fig.suptitle(f"Sampling grids of stride-2 layers on an {n}×{n} input (grey hatched: padded cells)")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _formula(centres: Sequence[float]) -> str:
    """'2i', '2i+1', ... when the centres follow one, else the list."""
    offset = centres[0]
    if all(c == 2 * i + offset for i, c in enumerate(centres)) and offset == int(offset):
        return "2i" if offset == 0 else f"2i{int(offset):+d}"
    return ", ".join(f"{c:g}" for c in centres)
