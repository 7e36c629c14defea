"""A config key's default is declared once (resnet/schema.py KEYS and configs/): no code reads a
config with a default of its own, ``cfg.get("key", <value>)`` or ``getattr(cfg, "key", <value>)`` (issue 56)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# cfg, config, cfg.data, data_cfg, logger (cfg.logger: W&B's keys), wandb_cfg, ...
CONFIG_NAMES = re.compile(r"(^|\.|_)(cfg|config|node|logger)(\.|$)")


def restated_defaults(source: str) -> list[str]:
    """Each ``<config>.get("<key>", <anything but None>)`` (the default positional or ``default=``) and
    ``getattr(<config>, "<key>", <anything but None>)`` of ``source``, as written."""
    found = []
    for call in ast.walk(ast.parse(source)):
        if not isinstance(call, ast.Call):
            continue
        args = list(call.args)
        if isinstance(call.func, ast.Attribute) and call.func.attr == "get":
            args.insert(0, call.func.value)
        elif not (isinstance(call.func, ast.Name) and call.func.id == "getattr" and args):
            continue
        args += [k.value for k in call.keywords if k.arg == "default"]
        receiver = ast.unparse(args[0])
        key = args[1] if len(args) > 1 else None
        default = args[2] if len(args) > 2 else None
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
    forms = 'a = logger.get("project", "p")\nb = cfg.get("k", default=1)\nc = getattr(cfg.data, "root", "x")'
    found = ["logger.get('project', 'p')", "cfg.get('k', default=1)", "getattr(cfg.data, 'root', 'x')"]
    assert restated_defaults(forms) == found
    plain = 'd = getattr(module, "x", None)\ne = getattr(cfg, "k", None)\nf = getattr(m, "y", 2)'
    assert restated_defaults(plain) == []


def test_no_code_reads_a_config_key_with_a_default_of_its_own():
    found = {
        str(path.relative_to(REPO)): calls
        for path in sorted([*(REPO / "resnet").rglob("*.py"), *(REPO / "data").rglob("*.py")])
        if (calls := restated_defaults(path.read_text()))
    }
    assert found == {}
