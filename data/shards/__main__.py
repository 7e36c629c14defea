"""Convert an image dataset into WebDataset-layout tar shards, or check converted shards.

Each split goes into its own folder: <split>-000000.tar ... and an index.json (the format:
data/shards/index.py). Bad input of any kind is one "error: ..." line and exit status 2;
check exits 1 when the shards have a problem.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from ..ilsvrc import GROUND_TRUTH, SOLUTION_CSV, train_samples, val_samples
from ..imagefolder import IMAGE_EXTENSIONS, check_same_classes, find_classes, find_images
from .index import (
    DEFAULT_SHARD_SIZE,
    INDEX_NAME,
    REWRITE,
    ShardError,
    ShardIndex,
    check_shards,
    read_index,
    records,
)
from .write import convert, file_samples

PROG = "python -m data.shards"
EXAMPLES = f"""\
examples:
  # any image folder split, <SRC>/<class>/<image>; val takes train's class list
  {PROG} folder /data/flowers/train /shards/flowers/train
  {PROG} folder /data/flowers/val /shards/flowers/val --classes-from /shards/flowers/train/index.json

  # ImageNet as downloaded: the train tar (or the class tars in it, or extracted class folders) ...
  {PROG} ilsvrc-train /data/ILSVRC2012_img_train.tar /shards/imagenet/train
  # ... and the flat val/ with Kaggle's labels, or the devkit's (its data/meta.mat is found beside them)
  {PROG} ilsvrc-val /data/val /shards/imagenet/val --labels /data/{SOLUTION_CSV}
  {PROG} ilsvrc-val /data/val /shards/imagenet/val --labels /data/ILSVRC2012_devkit_t12/data/{GROUND_TRUTH}

  # both ImageNet splits, found under one folder: OUT/train and OUT/val
  {PROG} imagenet /data/imagenet /shards/imagenet

  # verify a converted split: every shard present, whole, and as index.json lists it
  {PROG} check /shards/imagenet/train

An interrupted conversion resumes: run the same command again."""

# Where `imagenet RAW_ROOT` looks, in order: the download's names, a plain layout, Kaggle's.
TRAIN_SOURCES = ("ILSVRC2012_img_train.tar", "train", "ILSVRC/Data/CLS-LOC/train")
VAL_SOURCES = ("val", "ILSVRC/Data/CLS-LOC/val")
LABEL_SOURCES = (SOLUTION_CSV, f"ILSVRC2012_devkit_t12/data/{GROUND_TRUTH}", GROUND_TRUTH)
SPLIT_NAMES = {"train", "val", "validation", "test"}


class Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit status 2, like every other bad input."""

    def error(self, message: str):
        fail(f"{message} ({self.prog} --help)")


def fail(message: str, status: int = 2):
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(status)


def shard_size(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of images >= 1")
    return int(text)


def folder_classes(src: Path) -> list[str]:
    """The class folders of an image folder split, refusing the likely mix-ups: a flat
    folder, images beside the class folders, a dataset root."""
    if src.is_dir():
        entries = [p for p in src.iterdir() if not p.name.startswith(".")]
        loose = sorted(p.name for p in entries if p.is_file() and p.name.lower().endswith(IMAGE_EXTENSIONS))
        if loose and not any(p.is_dir() for p in entries):
            raise ValueError(
                f"{src} holds images but no class folders; ImageNet's flat val/ converts with "
                f"{PROG} ilsvrc-val {src} OUT --labels {SOLUTION_CSV}"
            )
        if loose:
            raise ValueError(
                f"{src} holds images beside its class folders ({loose[0]}, ...), which would belong to no class: "
                "move them into their class folders (a partly sorted val/?)"
            )
    classes = find_classes(src)
    if set(classes) <= SPLIT_NAMES:
        raise ValueError(
            f"{src} holds {', '.join(c + '/' for c in classes)}, not class folders: give one split, "
            f"e.g. {PROG} folder {src / classes[0]} OUT/{classes[0]}"
        )
    return classes


def cmd_folder(args: argparse.Namespace) -> None:
    classes = folder_classes(args.src)
    if args.classes_from:
        check_same_classes(read_index(args.classes_from).classes, classes)
    samples = file_samples(args.src, find_images(args.src, classes))
    split = args.split or args.src.resolve().name
    convert(samples, classes, args.out, split, args.shard_size, args.seed, f"folder {args.src.resolve()}")


def cmd_ilsvrc_train(args: argparse.Namespace) -> None:
    classes, samples = train_samples(args.src)
    convert(samples, classes, args.out, args.split, args.shard_size, args.seed, f"ilsvrc-train {args.src.resolve()}")


def cmd_ilsvrc_val(args: argparse.Namespace) -> None:
    classes, files = val_samples(args.val_dir, args.labels, args.devkit)
    if args.classes_from:
        check_same_classes(read_index(args.classes_from).classes, classes)
    source = f"ilsvrc-val {args.val_dir.resolve()} --labels {args.labels.resolve()}"
    convert(file_samples(args.val_dir, files), classes, args.out, args.split, args.shard_size, args.seed, source)


def cmd_imagenet(args: argparse.Namespace) -> None:
    """Both splits: everything is listed and checked before the (hours-long) train conversion."""
    root = args.raw_root
    if not root.is_dir():
        raise FileNotFoundError(f"ImageNet folder {root} does not exist")
    train = first_existing(root, TRAIN_SOURCES, "train set")
    val = first_existing(root, VAL_SOURCES, "val folder")
    if any(p.is_dir() for p in val.iterdir()):  # already sorted into class folders (valprep.sh)
        val_classes = folder_classes(val)
        val_files, val_source = find_images(val, val_classes), f"folder {val.resolve()}"
    else:
        labels = args.labels or first_existing(root, LABEL_SOURCES, "val labels file")
        devkit = args.devkit
        if devkit is None and (root / "ILSVRC2012_devkit_t12").is_dir():
            devkit = root / "ILSVRC2012_devkit_t12"
        val_classes, val_files = val_samples(val, labels, devkit)
        val_source = f"ilsvrc-val {val.resolve()} --labels {labels.resolve()}"
    classes, train_list = train_samples(train)
    check_same_classes(classes, val_classes)
    val_list = file_samples(val, val_files)
    convert(
        train_list,
        classes,
        args.out_root / "train",
        "train",
        args.shard_size,
        args.seed,
        f"ilsvrc-train {train.resolve()}",
    )
    convert(val_list, classes, args.out_root / "val", "val", args.shard_size, args.seed, val_source)


def first_existing(root: Path, names: tuple[str, ...], what: str) -> Path:
    for name in names:
        if (root / name).exists():
            return root / name
    raise FileNotFoundError(f"no ImageNet {what} under {root}: expected one of {', '.join(names)}")


def cmd_check(args: argparse.Namespace) -> None:
    try:
        print(check_split(read_index(args.out)))
    except (ShardError, OSError) as err:  # a problem with the shards, not with the command: status 1
        fail(str(err), status=1)


def check_split(index: ShardIndex) -> str:
    """Read every shard's headers; the summary table, or a ShardError naming the first problem."""
    check_shards(index)
    per_class: Counter[int] = Counter()
    seen: set[str] = set()
    for shard in index.shards:
        path = index.path(shard)
        with open(path, "rb") as f:
            found = records(f, str(path))
        if len(found) != shard.count:
            raise ShardError(f"{path} holds {len(found)} images, {INDEX_NAME} says {shard.count}; {REWRITE}")
        for record in found:
            if record.label >= len(index.classes):
                raise ShardError(
                    f"{path}: {record.key} has class index {record.label}, {INDEX_NAME} lists {len(index.classes)} "
                    f"classes; {REWRITE}"
                )
            if record.key in seen:
                raise ShardError(f"{path}: {record.key} is in another shard too; {REWRITE}")
            seen.add(record.key)
            per_class[record.label] += 1
    counts = [per_class[label] for label in range(len(index.classes))]
    empty = counts.count(0)
    rows = {
        "split": index.split,
        "classes": f"{len(index.classes):,} ({min(counts):,} to {max(counts):,} images each"
        + (f"; {empty:,} without any)" if empty else ")"),
        "images": f"{index.count:,} in {len(index.shards):,} shards of up to {index.shard_size:,} (seed {index.seed})",
        "bytes": f"{sum(s.bytes for s in index.shards):,}",
        "skipped": f"{len(index.skipped):,} unreadable source images"
        + (f" (in {INDEX_NAME})" if index.skipped else ""),
        "source": index.source,
    }
    width = max(map(len, rows))
    return f"{index.root}: OK\n" + "\n".join(f"  {name:<{width}}  {value}" for name, value in rows.items())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(
        prog=PROG, description=__doc__, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, about: str, run) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name, help=about, description=about, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        sub.set_defaults(run=run)
        return sub

    def shard_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--shard-size",
            type=shard_size,
            default=DEFAULT_SHARD_SIZE,
            metavar="N",
            help="images per shard (%(default)s)",
        )
        sub.add_argument(
            "--seed", type=int, default=0, metavar="S", help="of the shuffle that mixes the classes (%(default)s)"
        )

    def split_option(sub: argparse.ArgumentParser, default: str | None) -> None:
        shown = default or "the SRC folder name"
        sub.add_argument("--split", default=default, help=f"names the shards <split>-000000.tar ... ({shown})")

    class_list = "the train split's index.json: require its class list"

    sub = command("folder", "convert one image folder split, SRC/<class>/<image>", cmd_folder)
    sub.add_argument("src", type=Path, metavar="SRC")
    sub.add_argument("out", type=Path, metavar="OUT_DIR")
    sub.add_argument("--classes-from", type=Path, metavar="INDEX", help=class_list)
    split_option(sub, None)
    shard_options(sub)

    about = "convert ILSVRC2012_img_train.tar, a folder of the class tars in it, or extracted class folders"
    sub = command("ilsvrc-train", about, cmd_ilsvrc_train)
    sub.add_argument("src", type=Path, metavar="SRC")
    sub.add_argument("out", type=Path, metavar="OUT_DIR")
    split_option(sub, "train")
    shard_options(sub)

    sub = command("ilsvrc-val", "convert the flat ILSVRC2012 val/ folder", cmd_ilsvrc_val)
    sub.add_argument("val_dir", type=Path, metavar="VAL_DIR")
    sub.add_argument("out", type=Path, metavar="OUT_DIR")
    labels = f"{SOLUTION_CSV} (Kaggle) or the devkit's {GROUND_TRUTH}"
    sub.add_argument("--labels", type=Path, required=True, metavar="FILE", help=labels)
    devkit = "the extracted ILSVRC2012_devkit_t12/ or its data/meta.mat, for the devkit's labels (default: beside them)"
    sub.add_argument("--devkit", type=Path, metavar="PATH", help=devkit)
    sub.add_argument("--classes-from", type=Path, metavar="INDEX", help=class_list)
    split_option(sub, "val")
    shard_options(sub)

    about = "convert both ImageNet splits found under RAW_ROOT into OUT_ROOT/train and OUT_ROOT/val"
    sub = command("imagenet", about, cmd_imagenet)
    sub.add_argument("raw_root", type=Path, metavar="RAW_ROOT")
    sub.add_argument("out_root", type=Path, metavar="OUT_ROOT")
    labels = f"val labels (default: the first of {', '.join(LABEL_SOURCES)} under RAW_ROOT)"
    sub.add_argument("--labels", type=Path, metavar="FILE", help=labels)
    devkit = "as for ilsvrc-val (default: RAW_ROOT/ILSVRC2012_devkit_t12)"
    sub.add_argument("--devkit", type=Path, metavar="PATH", help=devkit)
    shard_options(sub)

    sub = command("check", "verify a converted split and print its summary", cmd_check)
    sub.add_argument("out", type=Path, metavar="OUT_DIR")

    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        raise SystemExit(2)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        args.run(args)
    except (OSError, ValueError, ImportError) as err:  # bad input (ShardError is a ValueError): one line
        fail(str(err))
    except KeyboardInterrupt:
        fail("interrupted; run the same command again to resume", status=130)


if __name__ == "__main__":
    main()
