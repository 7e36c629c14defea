"""Argument types the argparse commands share (``resnet-inspect``, ``resnet-demo``, ``resnet-cross``)."""

from __future__ import annotations

import argparse
import difflib

from ..padding import PRESETS, resolve_padding


def scheme_name(name: str) -> str:
    """An argparse type: a preset or a blurred one (``symmetric+blur(block_conv)``), as result rows
    spell it (:attr:`resnet.padding.Padding.name`); an unknown name says the nearest preset."""
    try:
        return resolve_padding(name).name
    except ValueError as err:  # its "(e.g. +padding=...)" is a config override's hint, not a command line's
        near = difflib.get_close_matches(name, list(PRESETS), n=1)
        hint = f"; did you mean {near[0]}?" if near else ""
        raise argparse.ArgumentTypeError(str(err).split(" (e.g.")[0] + hint) from None
