"""``resnet-figures``: draw the sampling grid of stride-2 layers.

``resnet-figures --out docs/sampling_grid.png [--size 8]`` draws which input pixels each output of a
3x3/2 conv and of a 1x1/2 shortcut reads, under ``symmetric`` and under TF ``same``
(:func:`resnet.figures.plot_sampling_grid`, measured on the real layers), into exactly the file
``--out`` names: its suffix picks the format, a name without one gets a PNG under that name.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..figures import plot_sampling_grid
from .errors import exit_config_error

DESCRIPTION = "The sampling grid of stride-2 layers, measured on the real layers and drawn."  # --help's first line
DEFAULT_OUT = Path("docs/sampling_grid.png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="FILE",
                        help=f"the image file to write, exactly this name; its suffix picks the format "
                             f"(.png, .svg, .pdf, ...; none: PNG) (default: {DEFAULT_OUT})")  # fmt: skip
    parser.add_argument("--size", type=int, default=8, help="input size n (even: the schemes differ)")
    args = parser.parse_args(argv)
    from matplotlib.backend_bases import FigureCanvasBase

    suffix, formats = args.out.suffix[1:].lower(), sorted(FigureCanvasBase.get_supported_filetypes())
    if args.out.is_dir():
        exit_config_error(f"--out {args.out} is a folder; name the file: --out {args.out / DEFAULT_OUT.name}")
    if suffix and suffix not in formats:
        exit_config_error(f"--out {args.out}: no image format .{suffix}; use one of "
                          f"{', '.join('.' + name for name in formats)}, or no suffix for a PNG")  # fmt: skip
    if args.size < 1:
        exit_config_error(f"--size {args.size}: an input size is at least 1")
    # matplotlib picks the format by the suffix and adds .png to a name without one (--out figs: figs.png),
    # so the figure is drawn into a hidden sibling named with the format, then renamed: a failed draw leaves no file
    drawn = args.out.with_name(f".{args.out.name}.{os.getpid()}.{suffix or 'png'}")
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        plot_sampling_grid(drawn, args.size)
        os.replace(drawn, args.out)
    except OSError as err:
        exit_config_error(f"could not write {args.out}: {err.strerror or err}")
    finally:
        drawn.unlink(missing_ok=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
