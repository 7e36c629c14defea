"""resnet-cross: a sweep's run folders become the whole cross matrix in one command, every model
under every scheme, top-1 and top-5, with the files it wrote named; bad input is one line."""

from __future__ import annotations

import json

import pytest

from resnet.cli import cross
from tests.helpers.training import run_in_process


@pytest.fixture(scope="module")
def sweep(tiny_folder, tmp_path_factory):
    """A Hydra sweep's folder: job 0 trained under symmetric, job 1 under asymmetric."""
    root = tmp_path_factory.mktemp("multirun") / "2026-11-28" / "12-18-10"
    for job, scheme in enumerate(("symmetric", "asymmetric")):
        run_in_process(tiny_folder, root / str(job), f"+padding={scheme}", "epochs=1", "max_steps_per_epoch=2")
    return root


@pytest.mark.slow
def test_a_sweep_folder_becomes_the_cross_matrix_of_its_runs(sweep, tiny_folder, tmp_path, capsys):
    out = tmp_path / "cross"
    cross.main(
        [str(sweep), "--schemes", "symmetric", "asymmetric", "tf_same", "--out", str(out), "data.workers=0"]
    )  # the data: the runs' own (imagefolder at tiny_folder), read from their last.pt
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert sorted((r["weights"].split("/")[-2], r["padding_name"]) for r in rows) == sorted(
        (job, scheme) for job in ("0", "1") for scheme in ("symmetric", "asymmetric", "tf_same")
    )
    assert {r["dataset"] for r in rows} == {"imagefolder"}
    assert "2 model(s) x 3 scheme(s) (symmetric, asymmetric, tf_same): 6 evaluations" in printed
    assert "=== [6/6] " in printed
    named = printed.strip().splitlines()[-1]
    assert named.startswith("tables and charts (")
    for name in ("cross.md", "cross.csv", "cross.png", "tensornets.md", "tensornets.png"):
        assert str(out / name) in named and (out / name).is_file()
    cross_md = (out / "cross.md").read_text().lower()
    assert "top-1" in cross_md and "top-5" in cross_md  # both metrics, not top-1 alone
    for trained in ("symmetric", "asymmetric"):
        assert trained in cross_md


def test_the_default_schemes_are_those_trained_with_and_the_two_of_the_question():
    assert cross.default_schemes(["tf_same", "symmetric"]) == ["symmetric", "asymmetric", "tf_same"]
    assert cross.default_schemes(["keras", "symmetric+blur(block_conv)"]) == [
        "symmetric",
        "symmetric+blur(block_conv)",
        "asymmetric",
        "keras",
    ]


@pytest.mark.parametrize("make, expected", [
    (lambda tmp: tmp / "nowhere", "no such file or folder; pass run folders, checkpoint files or hub weights"),
    (lambda tmp: tmp, "no last.pt below"),
])  # fmt: skip
def test_a_path_with_no_model_is_one_line(make, expected, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cross.main([str(make(tmp_path)), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and "\n" not in err and expected in err, err


def test_checkpoints_of_different_data_need_the_data_named():
    datas = [{"name": "imagefolder", "root": "/a"}, {"name": "fashion_mnist", "root": None}]
    with pytest.raises(cross.ConfigError, match=r"different data .*: pass the data to evaluate on, e\.g\. data="):
        cross.data_of([], datas)
    assert cross.data_of(["data=imagenet", "data.root=/x"], datas) == []  # the user's own
    assert cross.data_of([], datas[:1]) == ["data=imagefolder", "data.root=/a"]
    assert cross.data_of(["data.root=/b"], datas[:1]) == ["data=imagefolder"]  # a root given wins
