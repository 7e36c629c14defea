"""The ImageNet-shape proxy (benchmarks/imagenet_proxy.py): its folders, and the demo run on them."""

from __future__ import annotations

import json

import pytest
import torch
from torchvision.io import decode_jpeg, read_file

from benchmarks.imagenet_proxy import main, make_proxy_folders, render
from tests.helpers.builtin_data import require_fashion_mnist


def test_render_places_each_garment_at_its_own_offset_and_tint():
    garments = torch.full((3, 1, 28, 28), 255, dtype=torch.uint8)  # opaque squares: a flat tint, no noise
    scenes = render(garments, 72, torch.Generator().manual_seed(0))
    assert scenes.shape == (3, 3, 72, 72) and scenes.dtype == torch.uint8
    boxes, tints = [], []
    for scene in scenes:
        colours, counts = scene.flatten(1).T.unique(dim=0, return_counts=True)
        tint = colours[counts.argmax()]
        rows, cols = torch.nonzero((scene == tint.view(3, 1, 1)).all(0), as_tuple=True)
        side = int(rows.max() - rows.min()) + 1
        assert 44 <= side <= 64 and side == int(cols.max() - cols.min()) + 1  # a square of the drawn size
        boxes.append((int(rows.min()), int(cols.min()), side))
        tints.append(tuple(tint.tolist()))
    assert len(set(boxes)) == 3 and len(set(tints)) == 3  # each its own place, size and colour
    assert torch.equal(scenes, render(garments, 72, torch.Generator().manual_seed(0)))  # seeded


@pytest.mark.slow
def test_the_folders_have_imagenets_layout_and_the_demo_runs_on_them(tmp_path, capsys):
    require_fashion_mnist()
    root, out = tmp_path / "proxy", tmp_path / "out"
    main(["--root", str(root), "--train-per-class", "3", "--val-per-class", "2", "--epochs", "1",
          "--regrid-images", "8", "--out", str(out), "--no-grid", "model=resnet_tiny", "max_steps_per_epoch=2",
          "batch_size=8", "data.workers=0", "--regrid-set", "epochs=1"])  # fmt: skip
    classes = sorted(p.name for p in (root / "train").iterdir())
    assert classes == [f"n{c:08d}" for c in range(10)] == sorted(p.name for p in (root / "val").iterdir())
    files = sorted((root / "train").glob("*/*.JPEG"))
    assert len(files) == 30 and len(list((root / "val").glob("*/*.JPEG"))) == 20
    assert decode_jpeg(read_file(str(files[0]))).shape == (3, 72, 72)
    rows = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert {(r["trained_padding"], r["padding_name"]) for r in rows} == {
        (a, b) for a in ("symmetric", "asymmetric") for b in ("symmetric", "asymmetric")
    }
    assert all(r["dataset"] == "imagefolder" and r["n_images"] == 20 and r["crop"] == 64 for r in rows)
    assert (out / "regrid.md").is_file()
    assert "imagefolder (20 evaluation images)" in capsys.readouterr().out
    assert make_proxy_folders(root, 3, 2)["images"] == {"train": 30, "val": 20}  # made once: read back
    with pytest.raises(SystemExit, match="holds other files; pass --root"):
        make_proxy_folders(root, 4, 2)
