"""``resnet-cross``: the whole cross matrix of trained models in one command. Each model is
evaluated under each scheme, exactly as ``eval.py`` would (one results row each, in
``<out>/eval.jsonl``); then the tables and charts are written into ``--out`` and named.

    resnet-cross multirun/2026-11-28/12-00-00           # a sweep: every last.pt below the folder
    resnet-cross outputs/2026-11-28/10-00-00 outputs/2026-11-28/11-00-00 --schemes symmetric asymmetric tf_same
    resnet-cross multirun/2026-11-28/12-00-00 --schemes symmetric 'tf_same[stem_pool=symmetric]'
    resnet-cross runs/a/last.pt timm:resnet50.a1_in1k data=imagenet data.root=/data/imagenet

A folder stands for every ``last.pt`` below it (a run folder, a sweep's, ``outputs/``). Words with
``=`` are ``eval.py`` overrides for every evaluation (``data.root=``, ``val_images=``,
``batch_size=``); without ``data=``, the data the checkpoints were trained on is evaluated. The
schemes: every one the models were trained with (a per-site one by its name, a grid model's
presets), and ``symmetric`` and ``asymmetric``; ``--schemes`` takes any scheme's name.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..config import ConfigError
from ..evaluation.trained_data import data_overrides
from ..out_files import writable_folder
from ..padding import resolve_padding
from ..report.tables import scheme_order
from .arguments import help_parser, scheme_name
from .errors import one_line_errors
from .tables import written_files

DEFAULT_SCHEMES = ("symmetric", "asymmetric")


def models_of(paths: list[str]) -> list[str]:
    """The ``weights=`` values: each folder's ``last.pt`` files (sorted), each file, each hub name."""
    found = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            runs = sorted(str(p) for p in path.rglob("last.pt") if p.is_file())
            if not runs:
                raise ConfigError(f"no last.pt below {given}: pass train.py run folders, a sweep's "
                                  "multirun/<date>/<time>, checkpoint files or hub weights (timm:<name>)")  # fmt: skip
            found += runs
        elif path.is_file() or ":" in given:  # a checkpoint or weights file; torchvision:/timm:/keras:
            found.append(given)
        else:
            raise ConfigError(f"{given}: no such file or folder; pass run folders, checkpoint files or hub weights "
                              "(timm:<name>, torchvision:<enum>)")  # fmt: skip
    return list(dict.fromkeys(found))


def trained_with(models: list[str]) -> tuple[list[str], list[dict]]:
    """The schemes the checkpoints among ``models`` were trained with (a grid: its presets), and
    the data configs they were trained on."""
    from ..checkpoint import load_checkpoint, recorded_grid

    schemes, datas = [], []
    for model in models:
        if not Path(model).is_file():
            continue
        checkpoint = load_checkpoint(model)
        grid, _ = recorded_grid(checkpoint)
        schemes += grid or [trained_scheme(checkpoint["meta"])]
        data = (checkpoint.get("config") or {}).get("data")
        if data:
            datas.append(data)
    return schemes, datas


def trained_scheme(meta: dict) -> str:
    """The name of the scheme a checkpoint's model was built with, from its sites (a checkpoint
    written before per-site names says ``custom`` in ``padding_name``)."""
    padding = meta.get("padding")
    return resolve_padding(dict(padding)).name if padding else str(meta.get("padding_name", "symmetric"))


def default_schemes(trained: list[str]) -> list[str]:
    """The schemes to evaluate under where ``--schemes`` is not given: those the models were
    trained with, and the two of the question, in the tables' order."""
    return scheme_order([*trained, *DEFAULT_SCHEMES])


def main(argv: list[str] | None = None) -> None:
    parser = help_parser(__doc__)
    parser.add_argument("models", nargs="+", metavar="MODEL",
                        help="run folders (every last.pt below), checkpoint files, hub weights; KEY=VALUE: eval.py "
                             "overrides")  # fmt: skip
    parser.add_argument("--schemes", nargs="+", type=scheme_name,
                        help="the evaluation schemes (default: those the models were trained with, symmetric, "
                             "asymmetric)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("results/cross"), help="where the tables go")
    args = parser.parse_intermixed_args(argv)
    overrides = [word for word in args.models if "=" in word]
    with one_line_errors("resnet-cross"):
        run([word for word in args.models if "=" not in word], overrides, args.schemes, args.out)


def run(paths: list[str], overrides: list[str], schemes: list[str] | None, out: Path) -> None:
    """Evaluate every model under every scheme into ``out/eval.jsonl``, then write the tables."""
    from ..report.table_files import write_tables
    from .demo import evaluate_under

    if not paths:
        raise ConfigError("no models: pass run folders, checkpoint files or hub weights, e.g. resnet-cross "
                          "multirun/2026-11-28/12-00-00")  # fmt: skip
    models = models_of(paths)
    trained, datas = trained_with(models)
    schemes = list(dict.fromkeys(schemes)) if schemes else default_schemes(trained)
    data = data_overrides(overrides, datas)
    writable_folder(out, f"--out {out}", "--out results/cross")  # before the first evaluation
    results = out / "eval.jsonl"
    results.unlink(missing_ok=True)  # the tables hold these models only
    start, total = time.perf_counter(), len(models) * len(schemes)
    print(f"{len(models)} model(s) x {len(schemes)} scheme(s) ({', '.join(schemes)}): {total} evaluations", flush=True)
    for i, (model, scheme) in enumerate(((m, s) for m in models for s in schemes), 1):
        print(f"\n=== [{i}/{total}] {model} under {scheme} ===", flush=True)
        evaluate_under(model, scheme, results, [*data, *overrides])
    print()
    print(write_tables(results, out, schemes, cross_sources=None))
    print(f"tables and charts ({time.perf_counter() - start:.0f} s): {', '.join(map(str, written_files(out)))}")


if __name__ == "__main__":
    sys.exit(main())
