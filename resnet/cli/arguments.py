"""What the argparse commands share (``resnet-inspect``, ``resnet-demo``, ``resnet-cross``): argument
types, and their ``--help`` text from the module's docstring."""

from __future__ import annotations

import argparse
import difflib
import re

from ..padding import PRESETS, resolve_padding


def scheme_name(name: str) -> str:
    """An argparse type: a scheme's name (a preset, ``tf_same[stem_pool=symmetric]``,
    ``symmetric+blur(block_conv)``), canonical as result rows spell it
    (:attr:`resnet.padding.Padding.name`); an unknown name says the nearest preset."""
    try:
        return resolve_padding(name).name
    except ValueError as err:  # its "(e.g. +padding=...)" is a config override's hint, not a command line's
        near = difflib.get_close_matches(name, list(PRESETS), n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        raise argparse.ArgumentTypeError(str(err).split(" (e.g.")[0] + hint) from None


def help_parser(doc: str) -> argparse.ArgumentParser:
    """A parser whose ``--help`` is a command module's docstring, as a terminal shows it: its first
    paragraph the description (without the leading ``` ``resnet-<name>``: ```), the rest the
    epilog, examples kept as written, reST's double backquotes and roles left out."""
    text = re.sub(r":\w+:`([^`]*)`", r"\1", doc).replace("``", "")
    first, _, rest = text.strip().partition("\n\n")
    first = re.sub(r"^[\w-]+: ", "", first)  # the command names itself on the usage line already
    first = first[:1].upper() + first[1:]
    return argparse.ArgumentParser(description=first, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
