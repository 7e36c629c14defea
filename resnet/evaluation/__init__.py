"""Evaluation of trained and published weights under any padding scheme.

* :mod:`.loop`: the one evaluation loop (training's validation, ``eval.py``, the demo, detection);
* :mod:`.loader`: the evaluation split, sharded over processes, images resized once;
* :mod:`.tencrop`: the single and 10-crop protocols, cut on the device;
* :mod:`.protocol`: what ``eval.py`` reads from a config (weights, protocol, padding, checks),
  shared with the commands that read weights as it does;
* :mod:`.run`: the body of ``eval.py``.

This package never imports :mod:`resnet.engine`: training uses evaluation, not the reverse.
"""
