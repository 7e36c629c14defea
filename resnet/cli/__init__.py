"""The commands, each a ``main`` over library code (``[project.scripts]`` in pyproject.toml), and
what they share.

* :mod:`.train` (``resnet-train``): train a model, the app of the checkout's ``train.py``;
* :mod:`.eval` (``resnet-eval``): evaluate weights, the app of ``eval.py``;
* :mod:`.cross` (``resnet-cross``): evaluate trained models (a sweep's run folders) under every scheme, then the tables;
* :mod:`.tables` (``resnet-tables``): the error tables of a results file;
* :mod:`.seed_table` (``resnet-seed-table``): evaluate a model list under every scheme, then its tables;
* :mod:`.demo` (``resnet-demo``): train, evaluate and re-grid on Fashion-MNIST, on a CPU;
* :mod:`.detect` (``resnet-detect``): which padding preset weights were trained with;
* :mod:`.regrid` (``resnet-regrid``): move weights to another padding grid;
* :mod:`.export` (``resnet-export``): ONNX with every pad explicit, checked against onnxruntime;
* :mod:`.inspect` (``resnet-inspect``): the pad of every strided layer, per preset;
* :mod:`.figures` (``resnet-figures``): the sampling-grid figure;
* :mod:`.dashboard` (``resnet-dashboard``): the project's W&B workspace;
* :func:`one_line_errors` (:mod:`.errors`): an error the user can fix is one line, no traceback
  (``train.py``, ``eval.py`` and every command here).

Each runs as its console script ``resnet-<name>`` (``_`` written ``-``), the one form the documentation
uses; ``python -m resnet.cli.<name>`` runs the same ``main`` (torchrun, a checkout without ``pip install -e .``).
"""

from .errors import one_line_errors

__all__ = ["one_line_errors"]
