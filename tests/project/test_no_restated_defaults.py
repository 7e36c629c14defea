"""A config key's default is declared once (resnet/schema.py KEYS and configs/): no code reads a
config with a default of its own, ``cfg.get("key", <value>)`` (issue 56)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CONFIG_NAMES = re.compile(r"(^|\.|_)(cfg|config|node|data_cfg)(\.|$)")  # cfg, config, cfg.data, data_cfg, ...


def restated_defaults(source: str) -> list[str]:
    """Each ``<config>.get("<key>", <anything but None>)`` of ``source``, as written."""
    found = []
    for call in ast.walk(ast.parse(source)):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "get"):
            continue
        receiver = ast.unparse(call.func.value)
        key = call.args[0] if call.args else None
        default = call.args[1] if len(call.args) > 1 else None
        if not CONFIG_NAMES.search(receiver) or not isinstance(key, ast.Constant) or default is None:
            continue
        if not (isinstance(default, ast.Constant) and default.value is None):
            found.append(ast.unparse(call))
    return found


def test_the_detector_finds_a_restated_default_and_passes_a_plain_read():
    assert restated_defaults('x = cfg.get("grid_bn", "shared")\ny = cfg.data.get("root", None)') == [
        "cfg.get('grid_bn', 'shared')"
    ]
    assert restated_defaults('x = cfg.get("padding")\nz = counts.get("a", 0)') == []


def test_no_code_reads_a_config_key_with_a_default_of_its_own():
    found = {
        str(path.relative_to(REPO)): calls
        for path in sorted([*(REPO / "resnet").rglob("*.py"), *(REPO / "data").rglob("*.py")])
        if (calls := restated_defaults(path.read_text()))
    }
    assert found == {}
