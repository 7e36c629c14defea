"""Converting image folders and the raw ILSVRC2012 layouts into tar shards, on tiny generated images."""

from __future__ import annotations

import dataclasses
import io
import random
import re
import shutil
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from data import ilsvrc
from data.ilsvrc import read_val_labels, train_samples, val_samples
from data.imagefolder import find_classes, find_images
from data.shards import ShardError, check_shards, convert, file_samples, read_bytes, read_index, records
from data.shards import write as shards_write
from data.shards.__main__ import main
from data.shards.write import make_keys
from tests.helpers import procs
from tests.helpers.imagegen import jpeg_bytes, make_folder, smooth_image

REPO_ROOT = Path(__file__).resolve().parents[2]
SIZE = (24, 20)
WNIDS = ["n01440764", "n01443537", "n02102040"]  # the classes that have images
VAL_WNIDS = [WNIDS[i] for i in (0, 2, 1, 1, 0, 2)]  # the class of ILSVRC2012_val_0000000{1..6}


def folder_samples(src: Path) -> tuple[list[str], list[shards_write.Sample]]:
    classes = find_classes(src)
    return classes, file_samples(src, find_images(src, classes))


def convert_folder(src: Path, out: Path, **options):
    classes, samples = folder_samples(src)
    return convert(samples, classes, out, "train", **{"progress": False, **options})


def contents(index) -> dict[str, tuple[int, bytes]]:
    """key -> (label, image bytes) over every shard, read through ``records``."""
    found = {}
    for shard in index.shards:
        data = index.path(shard).read_bytes()
        for record in records(io.BytesIO(data), shard.name):
            assert record.key not in found
            found[record.key] = (record.label, data[record.offset : record.offset + record.size])
    return found


def shard_bytes(index) -> list[bytes]:
    return [index.path(shard).read_bytes() for shard in index.shards]


def one_line_error(capsys, argv: list[str], status: int = 2) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == status
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """An image folder split whose file stems collide across classes (0.JPEG in each)."""
    root = tmp_path_factory.mktemp("folder")
    make_folder(root / "train", {"a": 5, "b": 4, "c": 3}, size=SIZE)
    return root / "train"


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    """ILSVRC2012 as downloaded, in miniature: the train set as the outer tar, as its class
    tars and as extracted folders; the flat val/; the devkit and Kaggle's labels."""
    scipy_io = pytest.importorskip("scipy.io")
    root = tmp_path_factory.mktemp("raw")
    images = [jpeg_bytes(smooth_image(*SIZE, seed=i), quality=90) for i in range(9)]
    images[1] = jpeg_bytes(smooth_image(*SIZE, seed=1), format="PNG")  # ImageNet has a PNG under a .JPEG name
    images[5] = jpeg_bytes(smooth_image(*SIZE, seed=5).convert("CMYK"))  # and CMYK JPEGs
    (root / "class_tars").mkdir()
    for wnid in WNIDS:
        (root / "train" / wnid).mkdir(parents=True)
        with tarfile.open(root / "class_tars" / f"{wnid}.tar", "w", format=tarfile.GNU_FORMAT) as tar:
            for n in (10026, 3, 117):  # tar order is not sorted order
                path = root / "train" / wnid / f"{wnid}_{n}.JPEG"
                path.write_bytes(images.pop())
                tar.add(path, arcname=path.name)
    with tarfile.open(root / "ILSVRC2012_img_train.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        for wnid in reversed(WNIDS):
            tar.add(root / "class_tars" / f"{wnid}.tar", arcname=f"{wnid}.tar")

    (root / "val").mkdir()
    for n in range(1, len(VAL_WNIDS) + 1):
        (root / "val" / f"ILSVRC2012_val_{n:08d}.JPEG").write_bytes(jpeg_bytes(smooth_image(*SIZE, seed=50 + n)))

    # The devkit: 1,000 leaf synsets whose ILSVRC2012_IDs are a shuffle of the sorted wnids
    # (as in the real meta.mat, where ID 1 is not the first sorted wnid), then ancestors.
    all_wnids = sorted(WNIDS + [f"n{9_000_000 + i:08d}" for i in range(1000 - len(WNIDS))])
    ids = list(range(1, 1001))
    random.Random(0).shuffle(ids)
    id_of = dict(zip(all_wnids, ids))
    assert all(id_of[w] != all_wnids.index(w) + 1 for w in WNIDS)  # a sorted-index bug would show
    fields = [("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("num_children", "O")]
    synsets = np.empty((1005, 1), dtype=fields)  # the devkit's is 1860 x 1
    for row, wnid in enumerate(all_wnids):
        synsets[row, 0] = (np.uint16(id_of[wnid]), wnid, f"class {wnid}", np.uint8(0))
    for row in range(1000, 1005):
        synsets[row, 0] = (np.uint16(row + 1), f"n{8_000_000 + row:08d}", "ancestor", np.uint8(2))
    data = root / "ILSVRC2012_devkit_t12" / "data"
    data.mkdir(parents=True)
    scipy_io.savemat(data / "meta.mat", {"synsets": synsets})
    (data / "ILSVRC2012_validation_ground_truth.txt").write_text("".join(f"{id_of[w]}\n" for w in VAL_WNIDS))

    rows = [f"ILSVRC2012_val_{n:08d},{w} 1 2 20 18 {w} 3 4 10 12" for n, w in enumerate(VAL_WNIDS, 1)]
    (root / "LOC_val_solution.csv").write_text("ImageId,PredictionString\n" + "\n".join(reversed(rows)) + "\n")
    return root


# --- folder -> shards ------------------------------------------------------------------


def test_folder_round_trip(folder, tmp_path):
    index = convert_folder(folder, tmp_path / "out", shard_size=5)
    assert [shard.count for shard in index.shards] == [5, 5, 2]
    assert [shard.name for shard in index.shards] == ["train-000000.tar", "train-000001.tar", "train-000002.tar"]
    assert read_index(tmp_path / "out") == index
    check_shards(index)
    expected = {
        f"{path.parent.name}_{path.stem}": (index.classes.index(path.parent.name), path.read_bytes())
        for path in folder.glob("*/*.JPEG")
    }
    assert contents(index) == expected  # every image once, right class, bytes unchanged
    with open(index.path(index.shards[0]), "rb") as f:  # a file lists as its bytes do
        first = records(f, "first")
    assert first == records(io.BytesIO(index.path(index.shards[0]).read_bytes()), "first")
    assert len({r.label for r in first}) > 1  # the classes are mixed over the shards


def test_webdataset_reads_the_shards(folder, tmp_path):
    import webdataset as wds  # a test dependency (pyproject.toml): missing, this test must fail

    index = convert_folder(folder, tmp_path, shard_size=5)
    urls = [str(index.path(shard)) for shard in index.shards]
    got = {s["__key__"]: (int(s["cls"]), s["jpg"]) for s in wds.WebDataset(urls, shardshuffle=False)}
    assert got == contents(index) and len(got) == 12


def test_timms_wds_reader_reads_the_shards(folder, tmp_path):
    # timm's own reader (create_dataset("wds/...")), given the shards' brace pattern and count: the
    # same images with the same labels, the label read from each sample's .cls member.
    from PIL import Image
    from timm.data import create_dataset

    index = convert_folder(folder, tmp_path, shard_size=5)
    last = len(index.shards) - 1
    split = f"train-{{000000..{last:06d}}}.tar|{index.count}"
    dataset = create_dataset("wds/shards", root=str(tmp_path), split=split, is_training=False, batch_size=1)
    got = sorted((label, image.tobytes()) for image, label in dataset)
    expected = sorted(
        (label, Image.open(io.BytesIO(data)).convert("RGB").tobytes()) for label, data in contents(index).values()
    )
    assert got == expected and len(got) == 12


def test_shards_are_deterministic(folder, tmp_path):
    first = convert_folder(folder, tmp_path / "first", shard_size=5)
    again = convert_folder(folder, tmp_path / "again", shard_size=5)
    assert shard_bytes(first) == shard_bytes(again)
    with tarfile.open(first.path(first.shards[0])) as tar:
        assert {(m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) for m in tar} == {(0, 0, 0, "", "", 0o444)}
    # Another seed is another order of the same samples; converting it over the first
    # replaces every shard (none of them holds its new plan) and equals a fresh conversion.
    reseeded = convert_folder(folder, tmp_path / "first", shard_size=5, seed=1)
    fresh = convert_folder(folder, tmp_path / "fresh", shard_size=5, seed=1)
    assert shard_bytes(reseeded) == shard_bytes(fresh) != shard_bytes(again)
    assert contents(reseeded) == contents(again)


def test_a_shard_changed_under_the_conversion_fails_its_count_check_and_gets_no_index(folder, tmp_path, monkeypatch):
    # Another conversion into the same folder (here: shard 1 overwritten with shard 0 once written):
    # the final check of every shard against its plan stops it, and no index describes the folder.
    real = shards_write.write_shard

    def overwritten(path, planned, *args):
        failed = real(path, planned, *args)
        if path.name == "train-000001.tar":
            path.write_bytes((path.parent / "train-000000.tar").read_bytes())
        return failed

    monkeypatch.setattr(shards_write, "write_shard", overwritten)
    with pytest.raises(ShardError, match=r"train-000001\.tar does not hold the samples just written to it"):
        convert_folder(folder, tmp_path, shard_size=5)
    assert not (tmp_path / shards_write.INDEX_NAME).exists()


def test_interrupted_conversion_resumes(folder, tmp_path, monkeypatch, capsys):
    whole = convert_folder(folder, tmp_path / "whole", shard_size=3)
    assert len(whole.shards) == 4
    out = tmp_path / "out"
    read = shards_write.read_bytes
    calls = []

    def interrupted(sample, *args):
        calls.append(sample)
        if len(calls) == 8:  # while the third shard is written
            raise KeyboardInterrupt
        return read(sample, *args)

    monkeypatch.setattr(shards_write, "read_bytes", interrupted)
    with pytest.raises(KeyboardInterrupt):
        convert_folder(folder, out, shard_size=3)
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir()) == ["train-000000.tar", "train-000001.tar", "train-000002.tar.tmp"]
    kept = {name: (out / name).stat() for name in ("train-000000.tar", "train-000001.tar")}

    resumed = convert_folder(folder, out, shard_size=3, progress=True)
    line = capsys.readouterr().out.strip()
    assert line.startswith("train: 12 images in 4 shards") and line.endswith("(2 of 4 shards resumed)")
    assert shard_bytes(resumed) == shard_bytes(whole)
    assert read_index(out) == dataclasses.replace(whole, root=out)
    for name, before in kept.items():  # kept, not rewritten
        after = (out / name).stat()
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert not list(out.glob("*.tmp"))


def test_resume_reports_kept_shards(folder, tmp_path, capsys):
    convert_folder(folder, tmp_path, shard_size=5)
    (tmp_path / "train-000001.tar").write_bytes(b"")  # a shard lost in a crash
    convert_folder(folder, tmp_path, shard_size=5, progress=True)
    assert capsys.readouterr().out.rstrip().endswith("(2 of 3 shards resumed)")
    check_shards(read_index(tmp_path))


def test_unreadable_image_is_named_and_retried(tmp_path, capsys):
    make_folder(tmp_path / "src", {"a": 3, "b": 3}, size=SIZE)
    classes, samples = folder_samples(tmp_path / "src")
    victim = Path(samples[4].path)
    victim.rename(victim.with_suffix(".moved"))  # vanishes between listing and reading
    index = convert(samples, classes, tmp_path / "out", "train", shard_size=4)
    line = capsys.readouterr().out.strip()
    assert index.count == 5 and str(victim) in line
    assert "skipped 1 source image(s), unreadable or not regular files" in line
    assert read_index(tmp_path / "out").skipped == index.skipped
    assert index.skipped[0].startswith(f"{samples[4].key}: {victim} (FileNotFoundError")
    assert samples[4].key not in contents(index)

    victim.with_suffix(".moved").rename(victim)
    index = convert(samples, classes, tmp_path / "out", "train", shard_size=4)
    assert index.count == 6 and not index.skipped
    assert capsys.readouterr().out.rstrip().endswith("(1 of 2 shards resumed)")  # the incomplete one is rewritten


def test_make_keys():
    assert make_keys(["n1/n1_7.JPEG", "n2/n2_7.JPEG"]) == ["n1_7", "n2_7"]
    assert make_keys(["a/0.jpg", "b/0.jpg", "b/x/1.v2.png"]) == ["a_0", "b_0", "b_x_1_v2"]
    with pytest.raises(ValueError, match="both make the shard key 'a_b_c'"):
        make_keys(["a_b/c.jpg", "a/b_c.jpg", "d/c.jpg"])


# --- the shard format ---------------------------------------------------------------------


def tar_of(*members: tuple[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            shards_write.add_member(tar, name, data)
    return buffer.getvalue()


# Members at bytes 0 (k1.jpg), 1024 (k1.cls), 2048 (k2.jpg, data 2560 to 3560), 3584 (k2.cls); end blocks at 4608.
WHOLE = tar_of(("k1.jpg", b"\xff\xd8image"), ("k1.cls", b"2"), ("k2.jpg", bytes(1000)), ("k2.cls", b"0"))


@pytest.mark.parametrize(
    ("shard", "message"),
    [
        (b"", "too short for a tar file"),
        (b"<html>not found</html>", "too short for a tar file"),
        (b"GIF89a" + bytes(2000), "is not a tar file"),
        (WHOLE[:3000], "truncated: k2.jpg runs past its end"),
        (WHOLE[:2048], "truncated: it ends without the tar end-of-archive block"),
        (tar_of(("k1.jpg", b"x"), ("k2.jpg", b"y"), ("k2.cls", b"1")), "k1.jpg is not followed by its .cls"),
        (tar_of(("k1.jpg", b"x")), "k1.jpg is not followed by its .cls"),
        (tar_of(("k1.cls", b"1")), "k1.cls has no k1.jpg before it"),
        (tar_of(("k1.jpg", b"x"), ("k1.cls", b"one")), "k1.cls holds b'one', not a class index"),
        (tar_of(("k1.jpg", b"x"), ("k1.json", b"{}")), "unexpected member k1.json"),
    ],
)
def test_records_rejects_broken_shards(shard, message):
    with pytest.raises(ShardError, match=message) as error:
        records(io.BytesIO(shard), "s.tar")
    assert str(error.value).startswith("s.tar") and "\n" not in str(error.value)


def test_records_lists_offsets():
    found = records(io.BytesIO(WHOLE), "s.tar")
    assert [(r.key, r.label, WHOLE[r.offset : r.offset + r.size]) for r in found] == [
        ("k1", 2, b"\xff\xd8image"),
        ("k2", 0, bytes(1000)),
    ]


def test_index_errors(folder, tmp_path):
    with pytest.raises(ShardError, match="does not exist; convert the images into it first: python -m data.shards"):
        read_index(tmp_path / "missing")
    with pytest.raises(ShardError, match=f"no index.json in {tmp_path}; convert"):
        read_index(tmp_path)
    (tmp_path / "index.json").write_text("{not json")
    with pytest.raises(ShardError, match="cannot read .*index.json"):
        read_index(tmp_path)
    (tmp_path / "index.json").write_text('{"format": "webdataset", "version": 1}')
    with pytest.raises(ShardError, match="is not a resnet-padding-shards version 1 index"):
        read_index(tmp_path / "index.json")

    index = convert_folder(folder, tmp_path / "out", shard_size=5)
    path = index.path(index.shards[1])
    path.write_bytes(path.read_bytes()[:-512])
    with pytest.raises(ShardError, match=rf"{path} truncated: 19968 bytes, index.json says 20480; re-run"):
        check_shards(index)
    path.unlink()
    with pytest.raises(ShardError, match=f"{path} is missing; re-run the conversion"):
        check_shards(index)


def test_one_folder_holds_one_split(folder, tmp_path):
    convert_folder(folder, tmp_path, shard_size=5)
    classes, samples = folder_samples(folder)
    with pytest.raises(ValueError, match="holds the split 'train'; give each split its own folder"):
        convert(samples, classes, tmp_path, "val", progress=False)


# --- ILSVRC2012 ---------------------------------------------------------------------------


def test_ilsvrc_train_forms_agree(raw, tmp_path):
    forms = {name: train_samples(raw / name) for name in ("train", "class_tars", "ILSVRC2012_img_train.tar")}
    indexes = []
    for name, (classes, samples, skipped) in forms.items():
        assert skipped == []
        assert classes == WNIDS
        # For the outer tar, the bytes of each image come from its absolute offset in the outer
        # file: a TarFile opened at a member's data offset reports its members' offsets that way.
        got = sorted((s.key, classes[s.label], read_bytes(s)) for s in samples)
        assert got == sorted((p.stem, p.parent.name, p.read_bytes()) for p in (raw / "train").glob("*/*.JPEG")), name
        indexes.append(convert(samples, classes, tmp_path / name, "train", shard_size=4, progress=False))
    assert all(s.path == str(raw / "ILSVRC2012_img_train.tar") for s in forms["ILSVRC2012_img_train.tar"][1])
    assert shard_bytes(indexes[0]) == shard_bytes(indexes[1]) == shard_bytes(indexes[2])


def outer_tar(path: Path, members: dict[str, Path]) -> Path:
    """A tar of ``members`` under exactly the names given (``tar.add`` would strip a leading /)."""
    with tarfile.open(path, "w") as tar:
        for arcname, source in members.items():
            info = tar.gettarinfo(source, arcname="x")
            info.name = arcname
            with open(source, "rb") as f:
                tar.addfile(info, f)
    return path


def test_the_outer_tar_orders_classes_by_wnid_and_refuses_names_out_of_it(raw, tmp_path):
    tars = {wnid: raw / "class_tars" / f"{wnid}.tar" for wnid in WNIDS}
    # a member in a folder of its own, listed first: its class is still the wnid order's last
    members = {f"x/{WNIDS[2]}.tar": tars[WNIDS[2]], **{f"{w}.tar": tars[w] for w in WNIDS[:2]}}
    moved = outer_tar(tmp_path / "moved.tar", members)
    classes, samples, _ = train_samples(moved)
    assert classes == WNIDS and {s.label for s in samples if s.key.startswith(WNIDS[2])} == {2}
    for name, said in (("../../tmp/x.tar", "a path out of the archive: refused"),
                       ("/tmp/y.tar", "a path out of the archive: refused"),
                       ("cats.tar", "'cats' is not an ImageNet class (n and 8 digits")):  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(said)):
            train_samples(outer_tar(tmp_path / "bad.tar", {name: tars[WNIDS[0]]}))


def test_tar_members_that_are_not_regular_files_are_named_and_counted(raw, tmp_path):
    # A class tar holding a symlink and a FIFO named like images: never read, listed in the index
    # and the converter's summary instead of vanishing.
    import shutil as sh

    folder = tmp_path / "class_tars"
    sh.copytree(raw / "class_tars", folder)
    with tarfile.open(folder / f"{WNIDS[0]}.tar", "a") as tar:
        for name, kind in (("link.JPEG", tarfile.SYMTYPE), ("pipe.JPEG", tarfile.FIFOTYPE)):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, "/etc/passwd" if kind == tarfile.SYMTYPE else ""
            tar.addfile(info)
    classes, samples, skipped = train_samples(folder)
    assert [s.split(":")[-1] for s in skipped] == ["link.JPEG (a symbolic link to /etc/passwd)", "pipe.JPEG (a FIFO)"]
    index = convert(samples, classes, tmp_path / "out", "train", shard_size=4, progress=False, not_images=skipped)
    assert index.count == 9 and read_index(tmp_path / "out").skipped == tuple(skipped)
    assert "skipped 2 source image(s), unreadable or not regular files" in shards_write.summary(index, 0)


def test_ilsvrc_train_errors(raw, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist; give ILSVRC2012_img_train.tar"):
        train_samples(tmp_path / "missing")
    with pytest.raises(ValueError, match="not an uncompressed tar"):
        train_samples(raw / "LOC_val_solution.csv")
    mixed = tmp_path / "mixed"
    shutil.copytree(raw / "train", mixed)
    shutil.copy(raw / "class_tars" / f"{WNIDS[0]}.tar", mixed)
    with pytest.raises(ValueError, match="holds both class tars .* and class folders"):
        train_samples(mixed)
    val_tar = tmp_path / "ILSVRC2012_img_val.tar"
    with tarfile.open(val_tar, "w") as tar:
        tar.add(raw / "val" / "ILSVRC2012_val_00000001.JPEG", arcname="ILSVRC2012_val_00000001.JPEG")
    with pytest.raises(ValueError, match="holds ILSVRC2012_val_00000001.JPEG, not a <wnid>.tar"):
        train_samples(val_tar)


def expected_val(classes: list[str], files: list[tuple[str, int]]) -> None:
    names = [f"ILSVRC2012_val_{n:08d}.JPEG" for n in range(1, 7)]
    assert [(Path(path).name, classes[label]) for path, label in files] == list(zip(names, VAL_WNIDS))


@pytest.mark.parametrize("where", ["beside the labels", "devkit folder", "meta.mat"])
def test_ilsvrc_val_devkit_labels(raw, tmp_path, where):
    devkit = raw / "ILSVRC2012_devkit_t12"
    labels = devkit / "data" / ilsvrc.GROUND_TRUTH
    if where != "beside the labels":
        labels = Path(shutil.copy(labels, tmp_path))
    devkit = {"beside the labels": None, "devkit folder": devkit, "meta.mat": devkit / "data" / "meta.mat"}[where]
    classes, files = val_samples(raw / "val", labels, devkit)
    assert len(classes) == 1000 and classes == sorted(classes) and set(WNIDS) <= set(classes)
    expected_val(classes, files)


def test_ilsvrc_val_csv_labels(raw):
    classes, files = val_samples(raw / "val", raw / "LOC_val_solution.csv")
    assert classes == WNIDS  # the wnids the csv names
    expected_val(classes, files)
    txt = raw / "ILSVRC2012_devkit_t12" / "data" / ilsvrc.GROUND_TRUTH
    assert read_val_labels(raw / "LOC_val_solution.csv")[0] == read_val_labels(txt)[0]


def test_ilsvrc_val_errors(raw, tmp_path, monkeypatch):
    txt = raw / "ILSVRC2012_devkit_t12" / "data" / ilsvrc.GROUND_TRUTH
    csv = raw / "LOC_val_solution.csv"
    short = tmp_path / "short.csv"
    short.write_text("".join(line for line in csv.read_text().splitlines(True) if "_00000003," not in line))
    five = tmp_path / "data" / ilsvrc.GROUND_TRUTH
    five.parent.mkdir()
    five.write_text("".join(txt.read_text().splitlines(True)[:5]))
    shutil.copy(txt.with_name("meta.mat"), five.with_name("meta.mat"))
    alone = Path(shutil.copy(txt, tmp_path))
    cases = [
        ((tmp_path / "val", csv), FileNotFoundError, "val folder .* does not exist; expected the flat ILSVRC2012 val/"),
        (
            (raw / "val", tmp_path / "labels.txt"),
            FileNotFoundError,
            "does not exist; give the devkit's .* \\(from ILSVRC2012_devkit_t12.tar.gz\\) or Kaggle's LOC_val_solution",
        ),
        ((raw / "val", five), ValueError, "has 5 labels for .*'s 6 images"),
        (
            (raw / "val", short),
            ValueError,
            "1 of the 6 images in .* have no label in .*: ILSVRC2012_val_00000003.JPEG;",
        ),
        ((raw / "train", csv), ValueError, "holds class folders \\(n01440764/, ...\\), not the flat ILSVRC2012 val/"),
        ((raw / "val", alone), FileNotFoundError, "needs the devkit's data/meta.mat .* not found at"),
    ]
    for args, error, message in cases:
        with pytest.raises(error, match=message) as info:
            val_samples(*args)
        assert "\n" not in str(info.value)
    monkeypatch.setitem(sys.modules, "scipy.io", None)
    with pytest.raises(ImportError, match="needs scipy: pip install scipy; or use Kaggle's LOC_val_solution.csv"):
        val_samples(raw / "val", txt)


# --- the command line ------------------------------------------------------------------------


def test_cli_converts_imagenet_and_checks_it(raw, tmp_path, capsys):
    main(["imagenet", str(raw), str(tmp_path / "shards"), "--shard-size", "4"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("train: 9 images in 3 shards") and lines[1].startswith("val: 6 images in 2 shards")
    train, val = read_index(tmp_path / "shards" / "train"), read_index(tmp_path / "shards" / "val")
    assert train.classes == val.classes == WNIDS
    assert train.source == f"ilsvrc-train {raw / 'ILSVRC2012_img_train.tar'}"
    main(["check", str(tmp_path / "shards" / "val")])
    report = capsys.readouterr().out
    assert report.startswith(f"{tmp_path / 'shards' / 'val'}: OK") and "3 (2 to 2 images each)" in report


def test_cli_folder_with_train_classes(folder, tmp_path, capsys):
    make_folder(tmp_path / "val", {"a": 1, "b": 1, "c": 1}, size=SIZE)
    make_folder(tmp_path / "other", {"a": 1, "d": 1}, size=SIZE)
    main(["folder", str(folder), str(tmp_path / "train")])
    train_index = str(tmp_path / "train" / "index.json")
    main(["folder", str(tmp_path / "val"), str(tmp_path / "out"), "--classes-from", train_index])
    assert read_index(tmp_path / "out").split == "val" and read_index(tmp_path / "out").count == 3
    capsys.readouterr()
    error = one_line_error(
        capsys, ["folder", str(tmp_path / "other"), str(tmp_path / "o"), "--classes-from", train_index]
    )
    assert "val classes differ from train classes" in error


def test_cli_bad_input_is_one_line(raw, folder, tmp_path, capsys):
    src, out = str(folder), str(tmp_path / "out")
    (tmp_path / "empty").mkdir()
    cases = [
        (["folder", src, out, "--shard-size", "0"], "argument --shard-size: '0' is not a whole number of images >= 1"),
        (["folder", src, out, "--shard-size", "x"], "argument --shard-size: 'x' is not a whole number"),
        (["folder", str(folder.parent), out], "holds train/, not class folders: give one split"),
        (["folder", str(raw / "val"), out], "holds images but no class folders; .* ilsvrc-val"),
        (["ilsvrc-val", str(raw / "val"), out], "the following arguments are required: --labels"),
        (["ilsvrc-val", str(raw / "val"), out, "--labels", str(tmp_path / "x.csv")], "does not exist; give the dev"),
        (["ilsvrc-train", str(raw / "LOC_val_solution.csv"), out], "not an uncompressed tar"),
        (["imagenet", str(tmp_path / "empty"), out], "no ImageNet train set under .*: expected one of"),
        (["convert", src, out], "invalid choice: 'convert'"),
    ]
    for argv, message in cases:
        assert re.search(message, one_line_error(capsys, argv)), argv
    assert not (tmp_path / "out").exists()


def test_cli_interrupted(folder, tmp_path, monkeypatch, capsys):
    def interrupt(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(shards_write, "read_bytes", interrupt)
    with pytest.raises(SystemExit) as exit_info:
        main(["folder", str(folder), str(tmp_path)])
    assert exit_info.value.code == 130  # the last line, below the progress bar:
    assert capsys.readouterr().err.endswith("\nerror: interrupted; run the same command again to resume\n")


def test_cli_check_finds_a_broken_shard(folder, tmp_path, capsys):
    index = convert_folder(folder, tmp_path, shard_size=5)
    path = index.path(index.shards[2])
    path.write_bytes(b"<html>not found</html>".ljust(path.stat().st_size))  # the right size, not a tar
    error = one_line_error(capsys, ["check", str(tmp_path)], status=1)
    assert f"{path} is not a tar file" in error


def test_cli_as_a_program(folder, tmp_path):
    """``python -m data.shards`` itself: one error line, its status, no traceback. One run
    only: each interpreter spends ~6 s importing torch (data/__init__.py); the other bad
    inputs go through main() in-process above."""
    index = convert_folder(folder, tmp_path, shard_size=5)
    shard = index.path(index.shards[1])
    shard.write_bytes(shard.read_bytes()[:5000])
    proc = procs.run([sys.executable, "-m", "data.shards", "check", str(tmp_path)], timeout=120, cwd=REPO_ROOT)
    assert proc.returncode == 1 and not proc.stdout
    assert proc.stderr == (
        f"error: shard {shard} truncated: 5000 bytes, index.json says 20480; re-run the conversion (it resumes)\n"
    )


def test_the_download_folder_with_its_val_archive_still_packed_names_the_command_that_extracts_it(tmp_path, capsys):
    from data.shards.__main__ import main

    raw = tmp_path / "ILSVRC2012"
    (raw / "train").mkdir(parents=True)
    (raw / "ILSVRC2012_img_val.tar").write_bytes(b"")
    with pytest.raises(SystemExit):
        main(["imagenet", str(raw), str(tmp_path / "out")])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"no ImageNet val folder under {raw}: ILSVRC2012_img_val.tar is still packed; extract it first: " \
           f"mkdir {raw}/val && tar -xf {raw}/ILSVRC2012_img_val.tar -C {raw}/val" in line  # fmt: skip


def test_a_folder_conversion_records_the_entries_it_skipped_as_not_regular_files(tmp_path, capsys):
    # As the tar forms do: a FIFO named like an image is named in index.json's skipped and the summary.
    import os

    from data.shards.__main__ import main

    src = tmp_path / "src"
    make_folder(src, {"a": 2, "b": 2}, size=(24, 20))
    os.mkfifo(src / "a" / "pipe.JPEG")
    main(["folder", str(src), str(tmp_path / "out")])
    assert read_index(tmp_path / "out").skipped == (f"{src / 'a' / 'pipe.JPEG'} (a FIFO)",)
    assert "skipped 1 source image(s), unreadable or not regular files" in capsys.readouterr().out
