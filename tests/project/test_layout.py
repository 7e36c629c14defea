"""The layout holds: no import circles inside the project, evaluation independent of training, data/
independent of resnet/, and a package whose docstring maps its modules names every one."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("resnet", "data")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Project modules ``path`` imports, at any depth of the file (lazy imports count too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # "from . import x" names a module
    return found


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for package in PACKAGES for p in (REPO / package).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        targets = set()
        for imported in imports_of(path):
            while imported and imported not in files:  # resnet.weights.from_keras -> resnet.weights
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each a cycle's members."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_no_import_circles():
    # A package __init__ that re-exports its submodules is the usual exception: it is
    # imported first, so leave the edges from a submodule to its own package out.
    graph = {name: {t for t in targets if not name.startswith(t + ".")} for name, targets in import_graph().items()}
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_evaluation_never_imports_training():
    graph = import_graph()
    evaluation = [name for name in graph if name.startswith("resnet.evaluation")]
    assert evaluation, "no resnet.evaluation modules found"
    for name in evaluation:
        assert not {t for t in graph[name] if t.startswith("resnet.engine")}, name


def test_data_imports_nothing_from_the_library():
    """data/ is the lower layer: resnet/ builds on it, never the other way (python -m data.shards
    loads no model code)."""
    graph = import_graph()
    upward = {name: sorted(t for t in targets if t.split(".")[0] == "resnet")
              for name, targets in graph.items() if name.split(".")[0] == "data"}  # fmt: skip
    assert len(upward) > 10 and not {name: t for name, t in upward.items() if t}


CLI_MODULE = re.compile(r"resnet\.cli(\.\w+)*")


def reaches_into_cli(path: Path) -> list[str]:
    """Where ``path`` runs or imports the commands: runpy at all, an import of resnet.cli, or a
    string that names a resnet.cli module (importlib.import_module, runpy.run_module, __import__)."""
    found = [f"imports {name}" for name in imports_of(path) if name == "runpy" or CLI_MODULE.fullmatch(name)]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and CLI_MODULE.fullmatch(node.value):
            found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "runpy":
            found.append(f"line {node.lineno}: runpy.{node.attr}")
    return sorted(set(found))


def test_the_library_never_runs_or_imports_the_commands():
    """resnet/cli/ builds on the library, never the other way: no module of resnet/ outside it
    imports resnet.cli, by name or by a string, or forwards ``python -m`` to it with runpy (a command
    is run one way: its console script, or python -m resnet.cli.<name>)."""
    library = [p for p in (REPO / "resnet").rglob("*.py") if "cli" not in p.relative_to(REPO / "resnet").parts]
    assert len(library) > 20
    found = {str(p.relative_to(REPO)): where for p in library if (where := reaches_into_cli(p))}
    assert found == {}


def test_the_cli_check_sees_a_runpy_forward_and_a_string_import(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)  # a module resnet.forward of tmp_path
    path = tmp_path / "resnet" / "forward.py"
    path.parent.mkdir()
    path.write_text(
        'import importlib, runpy\nfrom .cli import demo\nimportlib.import_module("resnet.cli.tables")\n'
        'runpy.run_module("resnet.cli.detect", run_name="__main__")\n"""See resnet.cli.detect."""\n'
    )
    assert reaches_into_cli(path) == [
        "imports resnet.cli", "imports resnet.cli.demo", "imports runpy", "line 3: 'resnet.cli.tables'",
        "line 4: 'resnet.cli.detect'", "line 4: runpy.run_module",
    ]  # fmt: skip


def config_finders(path: Path) -> list[str]:
    """Where ``path`` finds or composes configs itself instead of through resnet.config: Hydra's
    ``initialize*``/``compose``, or a path ending in ``"configs"``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "hydra":
            names = [a.name for a in node.names if a.name.startswith(("initialize", "compose"))]
            found += [f"line {node.lineno}: hydra.{name}" for name in names]
        elif isinstance(node, ast.Constant) and node.value == "configs":
            found.append(f"line {node.lineno}: 'configs'")
    return found


def test_configs_are_found_and_composed_in_one_place():
    """resnet.config.config_dir() finds configs/, resnet.config.compose() composes from it: every
    command, the demo, the benchmarks and the tests' helpers go through them (train.py and eval.py
    sit beside configs/ and name it, as Hydra's decorator wants)."""
    files = [p for d in ("resnet", "data", "benchmarks") for p in (REPO / d).rglob("*.py")]
    files += list((REPO / "tests" / "helpers").glob("*.py"))
    found = {str(p.relative_to(REPO)): where for p in files if (where := config_finders(p))}
    assert set(found) == {"resnet/config.py"}, found


def test_the_config_check_sees_a_compose_and_a_configs_path(tmp_path):
    path = tmp_path / "finder.py"
    path.write_text('from hydra import compose, initialize_config_dir\nCONFIGS = ROOT / "configs"\n')
    assert config_finders(path) == ["line 1: hydra.compose", "line 1: hydra.initialize_config_dir", "line 2: 'configs'"]


def dataset_names() -> set[str]:
    """The ``name:`` of every configs/data/*.yaml."""
    names = {re.search(r"^name: *(\w+)", p.read_text(), re.M) for p in (REPO / "configs" / "data").glob("*.yaml")}
    return {m.group(1) for m in names if m}


def name_comparisons(path: Path, names: set[str]) -> list[str]:
    """Where ``path`` compares something with one of ``names`` (``==``, ``!=``, ``in``, a tuple of them)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                for item in side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]:
                    if isinstance(item, ast.Constant) and item.value in names:
                        found.append(f"line {node.lineno}: {item.value!r}")
    return found


def test_no_code_compares_a_datasets_name_outside_the_registry():
    """What a dataset is, the code asks data/registry.py (an in-memory dataset is one module of data/
    and one YAML; which folders hold wnids) or, for the ImageNet test sets, their own table
    (data/testsets.py): never its name anywhere else."""
    names = dataset_names()
    assert {"fashion_mnist", "synthetic", "imagenet", "imagenet_v2"} <= names
    tables = {REPO / "data" / "registry.py", REPO / "data" / "testsets.py"}
    files = [p for d in PACKAGES for p in (REPO / d).rglob("*.py") if p not in tables]
    files += [REPO / "train.py", REPO / "eval.py"]
    found = {str(p.relative_to(REPO)): where for p in files if (where := name_comparisons(p, names))}
    assert not found, found


def test_the_name_check_sees_a_comparison_and_a_tuple(tmp_path):
    path = tmp_path / "compares.py"
    path.write_text('if cfg.name == "synthetic":\n    pass\nok = name in ("imagenet", "fashion_mnist")\n')
    assert name_comparisons(path, {"synthetic", "fashion_mnist"}) == ["line 1: 'synthetic'", "line 3: 'fashion_mnist'"]


def test_weights_sources_do_not_reach_into_each_other():
    """Each source uses the shared helpers (common.py); none imports another's private names."""
    for path in (REPO / "resnet" / "weights").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                private = [alias.name for alias in node.names if alias.name.startswith("_")]
                assert not private, f"{path.name} imports private {private} from {node.module}"


def function_lengths() -> dict[str, int]:
    """Lines of every function in the packages, by ``path:name``."""
    lengths = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lengths[f"{path.relative_to(REPO)}:{node.name}"] = node.end_lineno - node.lineno + 1
    return lengths


def test_functions_read_in_one_screen():
    # The trainer's body calls named parts (build, resume, Checkpointer, the epochs, the results
    # row); no function in resnet/ or data/ runs past 80 lines.
    lengths = function_lengths()
    assert lengths["resnet/engine/run.py:_train"] <= 60
    assert {where: n for where, n in lengths.items() if n > 80} == {}


# Packages whose docstring maps their modules: each module (and sub-package) is named there as :mod:`.name`.
MAPPED = ("resnet/engine", "resnet/job", "resnet/runtime", "resnet/checkpoint", "resnet/report", "data/shards",
          "benchmarks/gpu_check")  # fmt: skip


def unnamed_modules(package: Path) -> list[str]:
    """The modules of ``package`` (a folder) that its ``__init__.py`` docstring does not name as
    ``:mod:`.name``` (or by its full dotted name); ``__main__`` needs no mention."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    dotted = ".".join(package.relative_to(REPO).parts)
    modules = {p.stem for p in package.glob("*.py")} | {p.parent.name for p in package.glob("*/__init__.py")}
    named = set(re.findall(rf":mod:`(?:\.|{re.escape(dotted)}\.)(\w+)`", doc))
    return sorted(modules - named - {"__init__", "__main__"})


def test_a_mapped_packages_docstring_names_every_module():
    found = {package: missing for package in MAPPED if (missing := unnamed_modules(REPO / package))}
    assert found == {}


def test_the_map_check_sees_an_unnamed_module(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for name in ("run.py", "loop.py", "state.py", "__main__.py", "sub/__init__.py"):
        (package / name).write_text("")
    (package / "__init__.py").write_text('"""Training: :mod:`.run` its body; loop.py one epoch; a run\'s state."""\n')
    assert unnamed_modules(package) == ["loop", "state", "sub"]
