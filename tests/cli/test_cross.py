"""resnet-cross: a sweep's run folders become the whole cross matrix in one command, every model
under every scheme, top-1 and top-5, with the files it wrote named; bad input is one line."""

from __future__ import annotations

import json

import pytest

from resnet.checkpoint import load_checkpoint
from resnet.cli import cross
from resnet.evaluation.trained_data import data_overrides
from resnet.padding import resolve_padding
from tests.helpers import procs
from tests.helpers.builtin_data import require_fashion_mnist
from tests.helpers.training import PY, REPO, run_in_process


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


@pytest.mark.slow
def test_the_sweep_of_per_site_schemes_a_new_user_runs_becomes_its_cross_matrix(tmp_path):
    """The commands of issue 54 as typed: a -m sweep of one site over another, then resnet-cross on
    its folder; every row and column is named by what each site got, never 'custom'."""
    require_fashion_mnist()
    sweep = [PY, REPO / "train.py", "-m", "+padding.stem_conv=same,symmetric", "+padding.block_conv=same",
             "model=resnet_tiny", "max_steps_per_epoch=2", "epochs=1", "val_images=100"]  # fmt: skip
    trained = procs.run(sweep, cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr[-3000:]
    (folder,) = (tmp_path / "multirun").glob("*/*")
    names = ["tf_same[stem_pool=symmetric]", "symmetric[block_conv=same]"]  # job 0: stem same, job 1: stem symmetric
    for job, name in enumerate(names):
        assert f"training resnet_tiny with padding {name} " in trained.stdout
        assert load_checkpoint(folder / str(job) / "last.pt")["meta"]["padding_name"] == name
    crossed = procs.run([procs.installed_script("resnet-cross"), folder.relative_to(tmp_path), "val_images=200"],
                        cwd=tmp_path)  # fmt: skip
    assert crossed.returncode == 0 and "Traceback" not in crossed.stderr, crossed.stderr[-3000:]
    schemes = ["symmetric", "symmetric[block_conv=same]", "asymmetric", "tf_same[stem_pool=symmetric]"]
    assert f"2 model(s) x 4 scheme(s) ({', '.join(schemes)}): 8 evaluations" in crossed.stdout
    rows = [json.loads(line) for line in (tmp_path / "results/cross/eval.jsonl").read_text().splitlines()]
    assert sorted((r["trained_padding"], r["padding_name"]) for r in rows) == sorted(
        (trained, evaluated) for trained in names for evaluated in schemes
    )
    assert all(resolve_padding(r["padding_name"]).as_dict() == r["padding"] for r in rows)  # each name its sites
    cross_md = (tmp_path / "results/cross/cross.md").read_text()
    assert "custom" not in cross_md and "Top-5" in cross_md
    for trained in names:  # a row per model, each its matched cell in bold
        line = next(line for line in cross_md.splitlines() if line.startswith(f"| {trained} |"))
        assert line.count("**") == 2


@pytest.mark.slow
def test_a_mix_of_presets_per_site_blur_and_grid_models_is_crossed_under_every_scheme_trained(
    tiny_folder, tmp_path, capsys
):
    mix = {
        "keras": ["+padding=keras"],
        "per_site": ["+padding=symmetric", "+padding.stem_pool=valid"],
        "blur": ["+padding=asymmetric", "+padding.block_conv_blur=true"],
        "grid": ["grid=[symmetric,tf_same]"],
    }
    for name, overrides in mix.items():
        run_in_process(tiny_folder, tmp_path / "runs" / name, *overrides, "epochs=1", "max_steps_per_epoch=1")
    out = tmp_path / "cross"
    cross.main([str(tmp_path / "runs"), "--out", str(out), "data.workers=0"])
    printed = capsys.readouterr().out
    schemes = ["symmetric", "symmetric[stem_pool=valid]", "asymmetric", "asymmetric+blur(block_conv)", "tf_same",
               "keras"]  # fmt: skip
    assert f"4 model(s) x 6 scheme(s) ({', '.join(schemes)}): 24 evaluations" in printed
    rows = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert len(rows) == 24 and {r["padding_name"] for r in rows} == set(schemes)
    assert {r["trained_padding"] for r in rows} == {
        "keras", "symmetric[stem_pool=valid]", "asymmetric+blur(block_conv)", "grid[symmetric,tf_same]"
    }  # fmt: skip
    assert all(r["top1_err"] is not None and r["top5_err"] is not None for r in rows)


def test_a_checkpoint_of_before_per_site_names_is_named_from_its_sites():
    meta = {"padding_name": "custom", "padding": {"stem_conv": "same", "stem_pool": "symmetric",
                                                   "stem_pool_value": "-inf", "block_conv": "same"}}  # fmt: skip
    assert cross.trained_scheme(meta) == "tf_same[stem_pool=symmetric]"
    assert cross.default_schemes([cross.trained_scheme(meta)])[-1] == "tf_same[stem_pool=symmetric]"


def test_schemes_takes_per_site_names_in_any_spelling(capsys):
    parsed = cross.help_parser(cross.__doc__)
    parsed.add_argument("--schemes", nargs="+", type=cross.scheme_name)
    args = parsed.parse_args(["--schemes", "symmetric[block_conv=same,stem_conv=same]", "asymmetric"])
    assert args.schemes == ["tf_same[stem_pool=symmetric]", "asymmetric"]
    with pytest.raises(SystemExit):
        parsed.parse_args(["--schemes", "symmetric[stem_cnv=same]"])
    err = capsys.readouterr().err
    assert "'stem_cnv=same'" in err and "the sites are stem_conv" in err


def test_help_shows_the_whole_description_without_markup(capsys):
    with pytest.raises(SystemExit):
        cross.main(["--help"])
    shown = capsys.readouterr().out
    description = shown.split("\n\n")[1]
    assert description.startswith("The whole cross matrix") and description.rstrip().endswith("and named.")
    assert "``" not in shown and ":attr:" not in shown
    assert "resnet-cross multirun/2026-11-28/12-00-00" in shown  # the examples, as written


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
        data_overrides([], datas)
    assert data_overrides(["data=imagenet", "data.root=/x"], datas) == []  # the user's own
    assert data_overrides([], datas[:1]) == ["data=imagefolder", "data.root=/a"]
    assert data_overrides(["data.root=/b"], datas[:1]) == ["data=imagefolder"]  # a root given wins
