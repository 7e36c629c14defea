"""The commands, one module per ``resnet-<name>`` (``_`` written ``-``; ``[project.scripts]``), each a ``main``
over library code; ``python -m resnet.cli.<name>`` runs the same ``main`` (torchrun, a checkout without
``pip install -e .``), and the checkout's ``train.py`` and ``eval.py`` run :mod:`.train`'s and :mod:`.eval`'s.
What they share: :mod:`.hydra_app`, :mod:`.arguments`, and :func:`one_line_errors` (:mod:`.errors`): an error
the user can fix is one line, no traceback (``train.py``, ``eval.py`` and every command here).
"""

from .errors import one_line_errors

__all__ = ["one_line_errors"]
