"""The test suite's own layout: shared helpers live in tests/helpers/, and no test module imports
another test module or conftest."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
# the folders that group the tests by the package they test (tests/engine/, tests/data/, ...)
GROUPS = sorted(p.name for p in TESTS.iterdir() if (p / "__init__.py").is_file() and p.name != "helpers")


def suite_module(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules of tests/ (first dotted name under tests/) that ``node`` imports."""
    if isinstance(node, ast.Import):
        names, level = [alias.name for alias in node.names], 0
    else:
        base = node.module or ""
        names = [base, *(f"{base}.{alias.name}" if base else alias.name for alias in node.names)]
        level = node.level
    found = []
    for name in filter(None, names):
        parts = name.split(".")
        if not level:
            if parts[0] == "tests":  # from tests.test_x import ..., from tests import test_x
                parts = parts[1:]
            elif not (parts[0].startswith("test_") or parts[0] == "conftest"):  # import test_x (tests/ on sys.path)
                continue
        while parts and parts[0] in GROUPS:  # tests.engine.test_train, from ..engine import test_train
            parts = parts[1:]
        if parts:
            found.append(parts[0])
    return found


def imports_of_test_modules(source: str, where: str) -> list[str]:
    """``where:line imports module`` for each import in ``source`` (lazy ones too) of a test module or conftest."""
    hits = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for module in dict.fromkeys(suite_module(node)):
                if module.startswith("test_") or module == "conftest":
                    hits.append(f"{where}:{node.lineno} imports {module}")
    return hits


def test_no_test_module_imports_another_or_conftest():
    files = sorted([*TESTS.rglob("test_*.py"), TESTS / "conftest.py", *(TESTS / "helpers").rglob("*.py")])
    hits = [hit for path in files for hit in imports_of_test_modules(path.read_text(), str(path.relative_to(REPO)))]
    assert not hits, "shared test code goes in tests/helpers/:\n" + "\n".join(hits)


def test_the_check_sees_every_form_of_import():
    source = "\n".join([
        "from tests.test_train import run_in_process",  # 1
        "from tests import procs, test_eval",  # 2
        "import tests.test_faults",  # 3
        "from .test_weights import n_params",  # 4
        "from . import conftest",  # 5
        "import test_tables",  # 6
        "from conftest import make_tiny_folder",  # 7
        "def lazy():",
        "    from tests.conftest import tiny_folder",  # 9
        "from tests.helpers.training import run_in_process",
        "from tests import procs",
        "from torch import testing",
        "import torch.testing",
        "from .helpers import faults",
        "from tests.engine.test_resume_rules import RULES",  # 15
        "from ..evaluation import test_regrid",  # 16
        "from tests.engine import helpers",
    ])  # fmt: skip
    assert imports_of_test_modules(source, "t.py") == [
        "t.py:1 imports test_train", "t.py:2 imports test_eval", "t.py:3 imports test_faults",
        "t.py:4 imports test_weights", "t.py:5 imports conftest", "t.py:6 imports test_tables",
        "t.py:7 imports conftest", "t.py:15 imports test_resume_rules", "t.py:16 imports test_regrid",
        "t.py:9 imports conftest",  # inside a function: ast.walk reaches it last
    ]  # fmt: skip


def test_shared_helpers_live_in_tests_helpers():
    flat = [p.name for p in TESTS.glob("*.py")
            if not p.name.startswith("test_") and p.name not in ("conftest.py", "__init__.py")]  # fmt: skip
    assert not flat, f"helper modules outside tests/helpers/: {sorted(flat)}"


def test_tests_are_grouped_by_the_package_they_test():
    flat = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not flat, f"test modules at the top of tests/, outside the folders {GROUPS}: {flat}"
    assert {"engine", "data", "evaluation", "models"} <= set(GROUPS)
    for group in GROUPS:
        assert list((TESTS / group).glob("test_*.py")), f"tests/{group}/ holds no tests"
