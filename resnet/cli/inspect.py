"""``resnet-inspect``: the pad every strided layer applies, per preset.

``resnet-inspect resnet50 --size 224 299`` prints the pad table of every preset (docs/padding.md,
"ResNet-50 at 224x224") for that architecture (:func:`resnet.inspect.format_pad_tables`);
``--presets symmetric "symmetric+blur(block_conv)"`` picks the columns, blurred schemes
included: a blurred site shows the pad of the BlurPool that subsamples there.
"""

from __future__ import annotations

import argparse
import difflib

from ..archs import ARCHS, canonical_name
from ..inspect import format_pad_tables
from ..padding import PRESETS
from .arguments import scheme_name
from .errors import exit_config_error

DESCRIPTION = "Which pad every strided layer of a model applies at a given input size."  # --help's first line


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("arch", nargs="?", default="resnet50")
    parser.add_argument("--size", type=int, nargs="+", default=[224])
    parser.add_argument(
        "--presets",
        nargs="+",
        default=list(PRESETS),
        type=scheme_name,
        help="columns: presets, or blurred ones such as 'symmetric+blur(block_conv)'",
    )
    args = parser.parse_args(argv)
    try:
        canonical_name(args.arch)
    except ValueError as err:  # one line, as for a config error: the name and the ones it may have meant
        near = difflib.get_close_matches(args.arch, list(ARCHS), n=1)
        exit_config_error(f"{err}" + (f"; did you mean {near[0]}?" if near else ""))
    print(format_pad_tables(args.arch, args.size, args.presets))


if __name__ == "__main__":
    main()
