"""The built-in demo: the padding question end to end on Fashion-MNIST, on a CPU.

``resnet-demo`` trains the default model (``python train.py``'s recipe on the
5-epoch schedule of ``configs/experiment/demo.yaml``, in bf16 where the CPU computes it natively)
once under each scheme (``symmetric`` and ``asymmetric`` by default) and once on the grid of
them all (``train.py grid=[...]``: one grid-robust model, with the experiment's ``grid_bn=affine``),
evaluates every checkpoint under
every scheme, and prints the "trained with x evaluated with" table of top-1 and top-5 errors.
Then it re-grids the model trained under the last scheme to the first
(:mod:`resnet.cli.regrid`, each method of :data:`REGRID`) and prints what each method recovered
with the images and seconds it used. It writes, under ``--out`` (default ``results/demo``):
``eval.jsonl`` (one row per evaluation), ``cross.md`` / ``cross.csv`` / ``cross.png`` (the
matrix), ``tensornets.md`` / ``.csv`` / ``.png`` (per-scheme errors) and ``regrid.md`` /
``.csv`` / ``.png`` (the re-gridding table). ``data=...`` overrides reach the evaluations and the
re-gridding too (``benchmarks/imagenet_proxy.py`` runs the demo on ImageNet-layout folders).
"""

from __future__ import annotations

import argparse
import re
import shlex
import signal
import sys
import time
from pathlib import Path

from ..command_lines import override
from ..config import compose, padding_overrides
from ..grid import grid_name, grid_paddings
from ..job.preempt import Stopped
from ..out_files import writable_folder
from ..report.charts import regrid_figure, save_figure
from ..report.console import format_table
from ..report.rows import read_rows
from ..report.table_files import write_tables
from ..report.tables import to_markdown, write_csv
from .arguments import scheme_name
from .errors import leave, one_line_errors

# Each re-gridding method the demo runs, as resnet-regrid overrides. bn: the BatchNorm
# statistics of 5,000 training images; distill: then two passes over 15,000 of them
# towards the source model under its own grid, its predictions and its feature maps after each
# stage (no labels read), one-cycle LR peaking at 0.05.
REGRID = {
    "bn": ("method=bn", "images=5000"),
    "distill": ("method=distill", "images=15000", "epochs=2", "lr=0.05", "features=3"),
}
REGRID_COLUMNS = ("weights", "evaluated with", "method", "images", "seconds", "top-1 err %", "top-5 err %")


def train_demo(title: str, padding: list[str], run_dir: Path, overrides: list[str]) -> Path:
    """One of the demo's models, its checkpoint: ``padding`` are the overrides choosing its scheme
    (``+padding=...``) or its grid (``grid=[...]``)."""
    from ..engine.run import train

    print(f"\n=== {title} ===", flush=True)
    # resume=true: a demo run again goes on where a stop left a model, and keeps the models it finished
    resumed = ["resume=true", override("run_dir", run_dir)]
    train(compose("train", "+experiment=demo", *native_bf16(overrides), *padding, *resumed, *overrides))
    return run_dir / "last.pt"


def native_bf16(overrides: list[str]) -> list[str]:
    """``amp=bf16`` where the demo trains on a CPU that computes bfloat16 natively (AMX or
    AVX512-BF16: faster than float32 there, docs/benchmarks.md),
    unless the overrides choose ``amp`` or a device; elsewhere bf16 is emulated, slower than float32."""
    import torch

    if any(o.partition("=")[0] in ("amp", "device") for o in overrides) or torch.cuda.is_available():
        return []
    probes = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")  # torch.cpu's, private: looked up
    native = any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)
    return ["amp=bf16"] if native else []


def data_overrides(overrides: list[str]) -> list[str]:
    """The ``data=`` / ``data.<key>=`` overrides of the training runs, which evaluation and
    re-gridding read too (the built-in Fashion-MNIST when there are none)."""
    picked = [o for o in overrides if o.lstrip("+~").partition("=")[0].split(".")[0] == "data"]
    chosen = any(o.partition("=")[0] == "data" for o in picked)  # data=<dataset>, not data.<key>=
    return picked if chosen else ["data=fashion_mnist", *picked]


def eval_overrides(overrides: list[str]) -> list[str]:
    """What evaluation reads of the training runs' overrides: their data, and ``val_images=N`` (the
    same N of the val images as their validation)."""
    return data_overrides(overrides) + [o for o in overrides if o.lstrip("+").partition("=")[0] == "val_images"]


def evaluate_under(weights: Path | str, scheme: str, results_file: Path, overrides: list[str]) -> dict:
    """One ``eval.py`` run of ``weights`` under ``scheme`` (with eval.py ``overrides``: the data, ...),
    its row appended to ``results_file`` (the demo's and ``resnet-cross``'s evaluations)."""
    from ..evaluation.run import evaluate_weights

    scheme_overrides = [*overrides, *padding_overrides(scheme), override("results_file", results_file.resolve())]
    return evaluate_weights(compose("eval", override("weights", weights), *scheme_overrides))


def merged(overrides: tuple[str, ...], extra: list[str]) -> list[str]:
    """``overrides`` with each key that ``extra`` sets replaced by ``extra``'s value."""
    keys = {o.partition("=")[0] for o in extra}
    return [o for o in overrides if o.partition("=")[0] not in keys] + extra


def latest(rows: list[dict], trained: str, evaluated: str) -> dict | None:
    """The last row of the weights trained under ``trained`` evaluated under ``evaluated``."""
    hits = [r for r in rows if r["trained_padding"] == trained and r["padding_name"] == evaluated]
    return hits[-1] if hits else None


def matrix_rows(rows: list[dict], trained: list[str], evaluated: list[str]) -> list[dict]:
    """One line per trained model: top-1 and top-5 error under every evaluation scheme."""
    table = []
    for label in trained:
        line: dict = {"trained with \\ evaluated with": label}
        for metric, short in (("top1_err", "top-1"), ("top5_err", "top-5")):
            for scheme in evaluated:
                row = latest(rows, label, scheme)
                line[f"{short} err % ({scheme})"] = row[metric] if row else float("nan")
        table.append(line)
    return table


def regrid_table(rows: list[dict], source: str, target: str, runs: dict[str, dict]) -> list[dict]:
    """The source-trained weights under ``target``: as they are, then after each method; the
    native error (under ``source``) on top for comparison."""

    def line(weights: str, evaluated: str, method: str, images: int, seconds: float, row: dict) -> dict:
        values = (weights, evaluated, method, images, seconds, row["top1_err"], row["top5_err"])
        return dict(zip(REGRID_COLUMNS, values))

    trained = f"trained under {source}"
    table = [
        line(trained, source, "none (native grid)", 0, 0.0, latest(rows, source, source)),
        line(trained, target, "none", 0, 0.0, latest(rows, source, target)),
    ]
    for method, run in runs.items():
        passes = run["distill_images"] // max(run["images"], 1)
        named = method + (" + features" if run.get("features") else "")
        named += f", {passes} pass{'es' if passes > 1 else ''}" if passes else ""
        table.append(line(f"re-gridded to {target}", target, named, run["images"], run["seconds"], run["eval"]))
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--schemes",
        nargs="+",
        default=["symmetric", "asymmetric"],
        type=scheme_name,
        help="presets, or blurred ones such as 'symmetric+blur(block_conv)'",
    )
    parser.add_argument(
        "--no-grid", dest="grid", action="store_false", help="leave out the grid-robust model (trained on every scheme)"
    )
    parser.add_argument(
        "--no-regrid",
        dest="regrid",
        action="store_false",
        help="leave out re-gridding the last scheme's model to the first scheme",
    )
    parser.add_argument(
        "--regrid-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override for every re-gridding method, e.g. images=512 (repeatable)",
    )
    parser.add_argument("--out", type=Path, default=Path("results/demo"))
    parser.add_argument("overrides", nargs="*", help="train.py overrides, e.g. epochs=2")
    args = parser.parse_intermixed_args(argv)  # train.py overrides before and after the options
    if len(set(args.schemes)) < len(args.schemes):
        parser.error(f"--schemes {' '.join(args.schemes)} names a scheme twice: give each once")
    with_grid = args.grid and len(args.schemes) > 1
    if with_grid:
        try:  # checked before any training: blurred sites, mixed pool pad values
            grid_paddings(args.schemes)
        except ValueError as err:
            parser.error(f"{err}; or pass --no-grid")
    with_regrid = args.regrid and len(args.schemes) > 1
    again = shlex.join(["resnet-demo", *(sys.argv[1:] if argv is None else argv)])
    # outside training (which saves on them): stop in one line; nohup's ignored SIGHUP stays ignored
    stops = [s for s in (signal.SIGTERM, signal.SIGHUP) if signal.getsignal(s) != signal.SIG_IGN]
    previous = {signum: signal.signal(signum, _interrupt) for signum in stops}
    try:
        with one_line_errors("resnet-demo"):
            run(args, with_grid, with_regrid)
    except Stopped as stopped:  # a signal while a model trained: saved; the demo itself is what goes on
        saved = str(stopped).split("; not requeued")[0].split("; to go on")[0]
        leave(
            f"{saved}; to go on: run the demo again ({again}): it resumes that model and keeps the finished ones",
            stopped.status,
        )
    except Interrupted as err:
        leave(
            f"resnet-demo: stopped by {signal.Signals(err.signum).name} between trainings (what was trained is "
            f"kept); to go on: run the demo again ({again})",
            128 + err.signum,
        )
    except KeyboardInterrupt:  # Ctrl-C outside training, or a second one during it (which stops unsaved)
        leave(f"resnet-demo: interrupted; every model goes on from its last save: run the demo again ({again})", 130)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class Interrupted(Exception):
    """SIGTERM or SIGHUP while the demo evaluates or re-grids (training saves on them instead)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupt(signum: int, frame) -> None:
    raise Interrupted(signum)


def run(args: argparse.Namespace, with_grid: bool, with_regrid: bool) -> None:
    """Train, evaluate, re-grid and write the tables (:func:`main` has checked the arguments)."""
    from .regrid import run as regrid

    start = time.perf_counter()
    writable_folder(args.out, f"--out {args.out}", "--out results/demo")  # before the first run
    results_file = args.out / "eval.jsonl"
    results_file.unlink(missing_ok=True)  # the demo's tables hold this run only
    (args.out / "regrid_eval.jsonl").unlink(missing_ok=True)
    checkpoints = {}
    data, scored = data_overrides(args.overrides), eval_overrides(args.overrides)
    for scheme in args.schemes:
        run_dir = args.out / f"train_{re.sub(r'[^A-Za-z0-9_.-]+', '_', scheme).strip('_')}"  # no ( ) [ ] in a path
        checkpoints[scheme] = train_demo(f"training under {scheme}", padding_overrides(scheme), run_dir, args.overrides)
    if with_grid:
        label = grid_name(args.schemes)
        title = f"training on the grid {label} (each step under one of them, drawn per step)"
        grid = [f"grid=[{','.join(args.schemes)}]"]
        checkpoints[label] = train_demo(title, grid, args.out / "train_grid", args.overrides)
    for trained, checkpoint in checkpoints.items():
        for evaluated in args.schemes:
            print(f"\n=== trained with {trained}, evaluated with {evaluated} ===", flush=True)
            evaluate_under(checkpoint, evaluated, results_file, scored)

    regrid_runs: dict[str, dict] = {}
    source, target = args.schemes[-1], args.schemes[0]
    if with_regrid:
        for method, overrides in REGRID.items():
            print(f"\n=== re-gridding the {source}-trained model to {target}: {method} ===", flush=True)
            out = args.out / f"regrid_{method}.pt"
            moved = [override("weights", checkpoints[source]), *padding_overrides(target), override("out", out), *data]
            run = regrid(compose("regrid", *moved, *merged(overrides, args.regrid_set)))
            run["eval"] = evaluate_under(out, target, args.out / "regrid_eval.jsonl", scored)
            regrid_runs[method] = run

    rows = read_rows(results_file)
    write_tables(results_file, args.out, schemes=args.schemes)
    print(
        f"\n{rows[0]['dataset']} ({rows[0]['n_images']:,} evaluation images): error % of each trained model "
        "under each scheme\n"
    )
    print(format_table(matrix_rows(rows, list(checkpoints), args.schemes)))
    files = "cross.md, cross.png, tensornets.md, tensornets.png"
    if regrid_runs:
        table = regrid_table(rows, source, target, regrid_runs)
        (args.out / "regrid.md").write_text(to_markdown(REGRID_COLUMNS, table) + "\n")
        write_csv(args.out / "regrid.csv", REGRID_COLUMNS, table)
        save_figure(regrid_figure(table), args.out / "regrid.png")
        print(
            f"\nThe {source}-trained model under {target}, re-gridded on training images (seconds: the method "
            "alone, on this machine)\n"
        )
        print(format_table(table))
        files += ", regrid.md, regrid.png"
    print(f"\ntables and charts: {args.out}/ {files}")
    print(f"demo wall time: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
