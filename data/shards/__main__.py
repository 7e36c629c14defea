"""Convert an image dataset into WebDataset-layout tar shards, or check converted shards.

Each split goes into its own folder: <split>-000000.tar ... and an index.json (the format:
data/shards/index.py). Bad input of any kind is one "error: ..." line and exit status 2;
check exits 1 when the shards have a problem: one missing, cut short or damaged, a sample
whose bytes no longer match its checksum, or (--deep) an image that does not decode.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from ..decode import DECODE_ERRORS, decode_rgb
from ..files import MAX_FILE_BYTES, MAX_FILE_MB, mib_bytes
from ..folder_scan import listed_images
from ..ilsvrc import GROUND_TRUTH, SOLUTION_CSV, train_samples, val_samples
from ..imagefolder import IMAGE_EXTENSIONS, check_same_classes, find_classes
from ..progress import Progress, progress_mode
from .index import (
    DEFAULT_SHARD_SIZE,
    INDEX_NAME,
    REWRITE,
    ShardError,
    ShardIndex,
    check_shards,
    read_index,
    records,
    sample_checksum,
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

  # verify a converted split: every shard present, whole, as index.json lists it, every sample's
  # checksum; --deep also decodes every image
  {PROG} check /shards/imagenet/train
  {PROG} check /shards/imagenet/train --deep

An interrupted conversion resumes: run the same command again."""

# Where `imagenet RAW_ROOT` looks, in order: the download's names, a plain layout, Kaggle's.
TRAIN_SOURCES = ("ILSVRC2012_img_train.tar", "train", "ILSVRC/Data/CLS-LOC/train")
VAL_SOURCES = ("val", "ILSVRC/Data/CLS-LOC/val")
LABEL_SOURCES = (SOLUTION_CSV, f"ILSVRC2012_devkit_t12/data/{GROUND_TRUTH}", GROUND_TRUTH)
SPLIT_NAMES = {"train", "val", "validation", "test"}
# the archives of the download that hold what a name of *_SOURCES would be, once extracted, and how
PACKED = {
    "val folder": ("ILSVRC2012_img_val.tar", "mkdir {root}/val && tar -xf {root}/ILSVRC2012_img_val.tar -C {root}/val"),
    "val labels file": ("ILSVRC2012_devkit_t12.tar.gz", "tar -xzf {root}/ILSVRC2012_devkit_t12.tar.gz -C {root}"),
}
SHOWN_PROBLEMS = 5  # samples named in one error line of check


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


def file_limit(text: str) -> int:
    """``--max-file-mb``'s MiB, as bytes."""
    try:
        mib = float(text)
    except ValueError:
        mib = 0.0
    if not 0 < mib < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of MiB > 0")
    return mib_bytes(mib)


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
    files, not_images = listed_images(args.src, classes)
    samples, source = file_samples(args.src, files), f"folder {args.src.resolve()}"
    write_split(args, samples, classes, args.out_dir, args.split or args.src.resolve().name, source, not_images)


def cmd_ilsvrc_train(args: argparse.Namespace) -> None:
    classes, samples, not_images = train_samples(args.src)
    write_split(args, samples, classes, args.out_dir, args.split, f"ilsvrc-train {args.src.resolve()}", not_images)


def cmd_ilsvrc_val(args: argparse.Namespace) -> None:
    classes, files = val_samples(args.val_dir, args.labels, args.devkit)
    if args.classes_from:
        check_same_classes(read_index(args.classes_from).classes, classes)
    source = f"ilsvrc-val {args.val_dir.resolve()} --labels {args.labels.resolve()}"
    write_split(args, file_samples(args.val_dir, files), classes, args.out_dir, args.split, source)


def cmd_imagenet(args: argparse.Namespace) -> None:
    """Both splits: everything is listed and checked before the (hours-long) train conversion."""
    root = args.raw_root
    if not root.is_dir():
        raise FileNotFoundError(f"ImageNet folder {root} does not exist")
    train = first_existing(root, TRAIN_SOURCES, "train set")
    val = first_existing(root, VAL_SOURCES, "val folder")
    val_not_images: list[str] = []
    if any(p.is_dir() for p in val.iterdir()):  # already sorted into class folders (valprep.sh)
        val_classes = folder_classes(val)
        (val_files, val_not_images), val_source = listed_images(val, val_classes), f"folder {val.resolve()}"
    else:
        labels = args.labels or first_existing(root, LABEL_SOURCES, "val labels file")
        devkit = args.devkit
        if devkit is None and (root / "ILSVRC2012_devkit_t12").is_dir():
            devkit = root / "ILSVRC2012_devkit_t12"
        val_classes, val_files = val_samples(val, labels, devkit)
        val_source = f"ilsvrc-val {val.resolve()} --labels {labels.resolve()}"
    classes, train_list, not_images = train_samples(train)
    check_same_classes(classes, val_classes)
    val_list = file_samples(val, val_files)
    train_source = f"ilsvrc-train {train.resolve()}"
    write_split(args, train_list, classes, args.out_root / "train", "train", train_source, not_images)
    write_split(args, val_list, classes, args.out_root / "val", "val", val_source, val_not_images)


def write_split(
    args: argparse.Namespace, samples: list, classes: list[str], out: Path, split: str, source: str, not_images=()
) -> None:
    """:func:`convert` with the command line's shard size, seed and file limit."""
    limit = args.max_file_bytes
    convert(
        samples, classes, out, split, args.shard_size, args.seed, source, not_images=not_images, max_file_bytes=limit
    )


def first_existing(root: Path, names: tuple[str, ...], what: str) -> Path:
    for name in names:
        if (root / name).exists():
            return root / name
    archive, extract = PACKED.get(what, (None, None))
    if archive is not None and (root / archive).is_file():
        raise FileNotFoundError(
            f"no ImageNet {what} under {root}: {archive} is still packed; extract it first: {extract.format(root=root)}"
        )
    raise FileNotFoundError(f"no ImageNet {what} under {root}: expected one of {', '.join(names)}")


def cmd_check(args: argparse.Namespace) -> None:
    try:
        print(check_split(read_index(args.out_dir), deep=args.deep))
    except (ShardError, OSError) as err:  # a problem with the shards, not with the command: status 1
        fail(str(err), status=1)


def check_split(index: ShardIndex, deep: bool = False) -> str:
    """Read every shard whole: its headers, each sample's bytes against its recorded checksum and,
    ``deep``, each image decoded as validation decodes it. The summary table, or a ShardError
    naming the first broken shard, or every sample that fails (``shard: key``, a few shown)."""
    check_shards(index)
    per_class: Counter[int] = Counter()
    seen: set[str] = set()
    changed: list[str] = []  # "shard: key" of each sample whose checksum differs
    undecodable: list[str] = []  # "shard: key (reason)" of each image that does not decode (deep)
    verified = all(shard.crc32 is not None for shard in index.shards)
    # A bar on a terminal only: in a log, the one line check prints (or its error) is the whole output.
    with Progress(index.count, "check", unit="img", enabled=progress_mode() == "bar") as bar:
        for shard in index.shards:
            path = index.path(shard)
            recorded = shard.checksums() if verified else None
            with open(path, "rb") as f:
                listed = records(f, str(path))  # every member whole: it checks each ends before the file does
                if len(listed) != shard.count:
                    raise ShardError(f"{path} holds {len(listed)} images, {INDEX_NAME} says {shard.count}; {REWRITE}")
                for n, record in enumerate(listed):
                    f.seek(record.offset)
                    data = f.read(record.size)
                    if record.label >= len(index.classes):
                        raise ShardError(
                            f"{path}: {record.key} has class index {record.label}, {INDEX_NAME} lists "
                            f"{len(index.classes)} classes; {REWRITE}"
                        )
                    if record.key in seen:
                        raise ShardError(f"{path}: {record.key} is in another shard too; {REWRITE}")
                    seen.add(record.key)
                    per_class[record.label] += 1
                    if recorded is not None and sample_checksum(data, record.label) != recorded[n]:
                        changed.append(f"{shard.name}: {record.key}")
                    if deep:
                        try:
                            decode_rgb(data)
                        except DECODE_ERRORS as err:
                            undecodable.append(f"{shard.name}: {record.key} ({type(err).__name__}: {err})")
                    bar.update()
    if changed:
        raise ShardError(
            f"{len(changed):,} sample(s) in {index.root} no longer match their checksums in {INDEX_NAME}, their bytes "
            f"changed since conversion: {_few(changed)}; {REWRITE}: it rewrites those shards"
        )
    if undecodable:
        raise ShardError(
            f"{len(undecodable):,} image(s) in {index.root} do not decode (training and evaluation skip them): "
            f"{_few(undecodable)}"
        )
    counts = [per_class[label] for label in range(len(index.classes))]
    empty = counts.count(0)
    rows = {
        "split": index.split,
        "classes": f"{len(index.classes):,} ({min(counts):,} to {max(counts):,} images each"
        + (f"; {empty:,} without any)" if empty else ")"),
        "images": f"{index.count:,} in {len(index.shards):,} shards of up to {index.shard_size:,} (seed {index.seed})",
        "bytes": f"{sum(s.bytes for s in index.shards):,}",
        "checksums": f"{index.count:,} verified (CRC-32)"
        if verified
        else f"absent: {INDEX_NAME} predates them (re-run the conversion to add them; it keeps the shards)",
        "decoded": f"{index.count:,} images" if deep else "not tried (--deep decodes every image)",
        "skipped": f"{len(index.skipped):,} unreadable source images"
        + (f" (in {INDEX_NAME})" if index.skipped else ""),
        "source": index.source,
    }
    width = max(map(len, rows))
    return f"{index.root}: OK\n" + "\n".join(f"  {name:<{width}}  {value}" for name, value in rows.items())


def _few(problems: list[str]) -> str:
    more = f" and {len(problems) - SHOWN_PROBLEMS:,} more" if len(problems) > SHOWN_PROBLEMS else ""
    return "; ".join(problems[:SHOWN_PROBLEMS]) + more


def shard_options(sub: argparse.ArgumentParser) -> None:
    """The options of every converting command: the shard size, the shuffle's seed, the file limit."""
    about = "images per shard (%(default)s)"
    sub.add_argument("--shard-size", type=shard_size, default=DEFAULT_SHARD_SIZE, metavar="N", help=about)
    about = "of the shuffle that mixes the classes (%(default)s)"
    sub.add_argument("--seed", type=int, default=0, metavar="S", help=about)
    about = f"a larger file is not read: skipped and listed as unreadable ({MAX_FILE_MB}, as data.max_file_mb)"
    sub.add_argument(
        "--max-file-mb", dest="max_file_bytes", type=file_limit, default=MAX_FILE_BYTES, metavar="MIB", help=about
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(
        prog=PROG, description=__doc__, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, about: str, run, *paths: str) -> argparse.ArgumentParser:
        """The subcommand ``name`` that calls ``run``; ``paths``: the metavars of its positional arguments."""
        sub = commands.add_parser(
            name, help=about, description=about, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        sub.set_defaults(run=run)
        for metavar in paths:
            sub.add_argument(metavar.lower(), type=Path, metavar=metavar)
        return sub

    def split_option(sub: argparse.ArgumentParser, default: str | None) -> None:
        shown = default or "the SRC folder name"
        sub.add_argument("--split", default=default, help=f"names the shards <split>-000000.tar ... ({shown})")

    class_list = "the train split's index.json: require its class list"

    sub = command("folder", "convert one image folder split, SRC/<class>/<image>", cmd_folder, "SRC", "OUT_DIR")
    sub.add_argument("--classes-from", type=Path, metavar="INDEX", help=class_list)
    split_option(sub, None)
    shard_options(sub)

    about = "convert ILSVRC2012_img_train.tar, a folder of the class tars in it, or extracted class folders"
    sub = command("ilsvrc-train", about, cmd_ilsvrc_train, "SRC", "OUT_DIR")
    split_option(sub, "train")
    shard_options(sub)

    sub = command("ilsvrc-val", "convert the flat ILSVRC2012 val/ folder", cmd_ilsvrc_val, "VAL_DIR", "OUT_DIR")
    labels = f"{SOLUTION_CSV} (Kaggle) or the devkit's {GROUND_TRUTH}"
    sub.add_argument("--labels", type=Path, required=True, metavar="FILE", help=labels)
    devkit = "the extracted ILSVRC2012_devkit_t12/ or its data/meta.mat, for the devkit's labels (default: beside them)"
    sub.add_argument("--devkit", type=Path, metavar="PATH", help=devkit)
    sub.add_argument("--classes-from", type=Path, metavar="INDEX", help=class_list)
    split_option(sub, "val")
    shard_options(sub)

    about = "convert both ImageNet splits found under RAW_ROOT into OUT_ROOT/train and OUT_ROOT/val"
    sub = command("imagenet", about, cmd_imagenet, "RAW_ROOT", "OUT_ROOT")
    labels = f"val labels (default: the first of {', '.join(LABEL_SOURCES)} under RAW_ROOT)"
    sub.add_argument("--labels", type=Path, metavar="FILE", help=labels)
    devkit = "as for ilsvrc-val (default: RAW_ROOT/ILSVRC2012_devkit_t12)"
    sub.add_argument("--devkit", type=Path, metavar="PATH", help=devkit)
    shard_options(sub)

    about = "verify a converted split (every byte, against its checksums) and print its summary"
    sub = command("check", about, cmd_check, "OUT_DIR")
    sub.add_argument("--deep", action="store_true", help="also decode every image, as validation does")

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
