"""The built-in demo: the padding question end to end on Fashion-MNIST, on a CPU.

``python -m resnet.demo`` trains the default model (``python train.py``'s config) once
under each scheme (``symmetric`` and ``asymmetric`` by default), evaluates every
checkpoint under every scheme, and prints the "trained with x evaluated with" table of
top-1 and top-5 errors. It writes, under ``--out`` (default ``results/demo``):
``eval.jsonl`` (one row per evaluation), ``cross.md`` / ``cross.csv`` / ``cross.png``
(the matrix) and ``tensornets.md`` / ``.csv`` / ``.png`` (per-scheme errors).
"""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from .config import padding_overrides, register_configs
from .padding import resolve_padding
from .report.console import format_table
from .report.rows import read_rows
from .tables import write_tables


def config_dir() -> Path:
    """The project's ``configs/``: ``$RESNET_PADDING_CONFIGS``, else the working directory's
    (the demo runs from a checkout: train.py and eval.py live there too)."""
    path = Path(os.environ.get("RESNET_PADDING_CONFIGS", "configs")).resolve()
    if not (path / "train.yaml").is_file():
        raise SystemExit(
            f"error: no train.yaml in {path}; run from the repository root or set RESNET_PADDING_CONFIGS=/repo/configs"
        )
    return path


def train_under(scheme: str, run_dir: Path, overrides: list[str]) -> dict:
    from .engine.run import train

    register_configs()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[*padding_overrides(scheme), f"run_dir={run_dir}", *overrides])
    return train(cfg)


def evaluate_under(checkpoint: Path, scheme: str, results_file: Path, overrides: list[str]) -> dict:
    from .evaluation.run import evaluate_weights

    register_configs()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(
            config_name="eval",
            overrides=[
                f"weights={checkpoint}",
                "data=fashion_mnist",
                *padding_overrides(scheme),
                f"results_file={results_file.resolve()}",
                *overrides,
            ],
        )
    return evaluate_weights(cfg)


def _scheme_name(name: str) -> str:
    """An argparse type: a scheme's name as result rows spell it (``resnet.padding.Padding.name``)."""
    try:
        return resolve_padding(name).name
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def matrix_rows(rows: list[dict], schemes: list[str]) -> list[dict]:
    """One line per training scheme: top-1 and top-5 error under every evaluation scheme."""
    table = []
    for trained in schemes:
        line: dict = {"trained with \\ evaluated with": trained}
        for metric, short in (("top1_err", "top-1"), ("top5_err", "top-5")):
            for evaluated in schemes:
                hits = [r for r in rows if r["trained_padding"] == trained and r["padding_name"] == evaluated]
                line[f"{short} err % ({evaluated})"] = hits[-1][metric] if hits else float("nan")
        table.append(line)
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemes", nargs="+", default=["symmetric", "asymmetric"], type=_scheme_name,
                        help="presets, or blurred ones such as 'symmetric+blur(block_conv)'")
    parser.add_argument("--out", type=Path, default=Path("results/demo"))
    parser.add_argument("overrides", nargs="*", help="train.py overrides, e.g. epochs=2")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    results_file = args.out / "eval.jsonl"
    results_file.unlink(missing_ok=True)  # the demo's tables hold this run only
    checkpoints = {}
    for scheme in args.schemes:
        print(f"\n=== training under {scheme} ===", flush=True)
        run_dir = args.out / f"train_{re.sub(r'[^A-Za-z0-9_.-]+', '_', scheme).strip('_')}"  # no ( ) in a path
        train_under(scheme, run_dir, args.overrides)
        checkpoints[scheme] = run_dir / "last.pt"
    for trained, checkpoint in checkpoints.items():
        for evaluated in args.schemes:
            print(f"\n=== trained with {trained}, evaluated with {evaluated} ===", flush=True)
            evaluate_under(checkpoint, evaluated, results_file, [])

    rows = read_rows(results_file)
    write_tables(results_file, args.out, schemes=args.schemes)
    print("\nFashion-MNIST test set (10,000 images): error % of each trained model under each scheme\n")
    print(format_table(matrix_rows(rows, args.schemes)))
    print(f"\ntables and charts: {args.out}/cross.md, cross.png, tensornets.md, tensornets.png")
    print(f"demo wall time: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
