"""``resnet-tables``: regenerate the error tables from a results file.

``resnet-tables results/eval.jsonl --out results/tables [--schemes symmetric asymmetric]
[--delta asymmetric symmetric] [--reference] [--wandb PROJECT]`` writes ``tensornets.md/.csv/.png``
and ``cross.md/.csv/.png`` into ``--out`` (:func:`resnet.report.table_files.write_tables`) and
prints both Markdown tables; how rows become tables (latest wins, protocols never merge):
:mod:`resnet.report.tables`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..report.rows import read_rows
from ..report.table_files import write_tables
from ..report.tables import cross_matrices, log_to_wandb, reference_note, scheme_table
from ..report.wandb_log import start_run


def written_files(out: Path) -> list[Path]:
    """The files :func:`resnet.report.table_files.write_tables` wrote into ``out``, to name them."""
    files = [out / f"{name}.{ext}" for name in ("tensornets", "cross") for ext in ("md", "csv", "png")]
    return [file for file in files if file.is_file()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Regenerate the error tables from a results file: ``resnet-tables``.")
    parser.add_argument("results", type=Path, help="JSON lines written by the evaluator")
    parser.add_argument("--out", type=Path, default=Path("results/tables"))
    parser.add_argument("--schemes", nargs="+", help="columns, in order (default: every scheme in the results)")
    parser.add_argument("--delta", nargs=2, metavar=("A", "B"), help="delta columns A - B (default: 2nd - 1st)")
    parser.add_argument("--reference", action="store_true", help="add TensorNets' published numbers")
    parser.add_argument("--wandb", metavar="PROJECT", help="also log both tables to a W&B run (WANDB_MODE applies)")
    args = parser.parse_args(argv)
    try:
        print(write_tables(args.results, args.out, args.schemes, args.delta, args.reference))
    except (FileNotFoundError, ValueError) as err:  # no file, a corrupt line, a scheme with no results
        sys.exit(f"error: {err}")
    note = reference_note(scheme_table(read_rows(args.results), args.schemes, args.delta)) if args.reference else None
    if note:
        print(f"note: {note}", file=sys.stderr)
    print(f"tables and charts: {', '.join(map(str, written_files(args.out)))}")
    if args.wandb:  # offline, in one line, where online cannot work (start_run)
        rows = read_rows(args.results)
        run = start_run({"project": args.wandb}, {"results": str(args.results)}, group=None, run_dir=args.out,
                        job_type="tables")  # fmt: skip
        log_to_wandb(run, scheme_table(rows, args.schemes, args.delta), cross_matrices(rows), args.reference)
        run.finish()


if __name__ == "__main__":
    main()
