"""The commands, each a thin ``main`` over library code, and what they share.

* :func:`one_line_errors` (:mod:`.errors`): an error the user can fix is one line, no traceback
  (``train.py``, ``eval.py`` and every command here).
"""

from .errors import one_line_errors

__all__ = ["one_line_errors"]
