"""submitit's tasks forked from the tests' server, as torchrun's workers are (its ``PYTHON_EXEC``).

submitit starts each task as ``<python> -u -m submitit.core._submit <folder>``, where ``python`` is
an argument of its executors (``SlurmExecutor``, ``LocalExecutor``) that hydra-submitit-launcher
never passes: the sweep's own interpreter, a new one per task. :func:`sweep_env` gives a sweep
process a ``sitecustomize`` that makes the tests' stand-in (tests/helpers/zygote_exec.py) that
default, so each task is a fork of the server (which joins a SLURM node's namespaces) instead of a
new interpreter importing torch. Nothing else of submitit changes: its pickles, signals, result
files and requeues are its own.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import procs

SITE = '''"""sitecustomize of a sweep under the tests (tests/helpers/submitit_tasks.py): submitit's
executors start their tasks with $TESTS_TASK_PYTHON unless told otherwise."""
import importlib.abc
import os
import sys

MODULES = {"submitit.local.local": "LocalExecutor", "submitit.slurm.slurm": "SlurmExecutor"}


def default_python(cls):
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("python", os.environ["TESTS_TASK_PYTHON"])
        init(self, *args, **kwargs)

    cls.__init__ = __init__


class AfterImport(importlib.abc.MetaPathFinder):
    """Finds the executors' modules through the other finders, and sets the default as each is run."""

    def find_spec(self, name, path, target=None):
        if name not in MODULES:
            return None
        others = (f for f in sys.meta_path if f is not self and hasattr(f, "find_spec"))
        spec = next((found for f in others if (found := f.find_spec(name, path, target)) is not None), None)
        if spec is None:
            return None
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            default_python(getattr(module, MODULES[name]))

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("TESTS_TASK_PYTHON"):
    sys.meta_path.insert(0, AfterImport())
'''


def sweep_env(folder: Path) -> dict[str, str]:
    """The environment of a sweep process whose submitit tasks are forked (none where the server is off)."""
    python = procs.forking_python()
    if python is None:
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITE)
    return {"PYTHONPATH": str(folder), "TESTS_TASK_PYTHON": python}
