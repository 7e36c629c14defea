"""``resnet-figures``: draw the sampling grid of stride-2 layers.

``resnet-figures --out docs/sampling_grid.png [--size 8]`` draws which input pixels each output of a
3x3/2 conv and of a 1x1/2 shortcut reads, under ``symmetric`` and under TF ``same``
(:func:`resnet.figures.plot_sampling_grid`, measured on the real layers).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..figures import plot_sampling_grid

DESCRIPTION = "The sampling grid of stride-2 layers, measured on the real layers and drawn."  # --help's first line


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--out", type=Path, default=Path("docs/sampling_grid.png"))
    parser.add_argument("--size", type=int, default=8, help="input size n (even: the schemes differ)")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    plot_sampling_grid(args.out, args.size)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
