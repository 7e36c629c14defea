"""Every form a typo of the command line takes ends in one line on stderr, status 2, saying what to
type instead, on train.py and eval.py alike (resnet/cli/hydra_app.py): before Hydra reads the
overrides (``checked_overrides``: a ``+`` or ``++`` that would add a key nothing reads, a group
chosen twice, a scheme name Hydra cannot parse), or after it failed to compose them
(``composition_error``). Most rows run the command's Hydra app in this process; a few run it as
each form of the command, the checkout's scripts and the installed ones."""

from __future__ import annotations

import importlib
import sys

import pytest

from resnet.cli import hydra_app
from resnet.cli.hydra_app import checked_overrides, hydra_command
from resnet.config import padding_from_config, padding_overrides
from resnet.padding import PRESETS, Padding, resolve_padding
from tests.helpers import procs
from tests.helpers.compose import compose_config
from tests.helpers.training import PY, REPO

# The command line's overrides -> what its one line says, after "error: " and the override as typed.
TYPOS = {
    ("++paddng=asymmetric",): "did you mean +padding=asymmetric?",
    ("++foo=1",): "would be read by nothing",
    ("++paddng.stem_conv=same",): "did you mean +padding.stem_conv=same?",
    ("+padding=symmetric", "+padding=asymmetric"): "choose one: +padding=symmetric or +padding=asymmetric",
    ("+padding=symmetric", "++padding=asymmetric"): "choose one: +padding=symmetric or +padding=asymmetric",
    ("+padding=SYMMETRIC",): "did you mean +padding=symmetric?",
    ("-m", "+padding=symmetric,asymetric"): "did you mean +padding=symmetric,asymmetric?",
    ("-m", "+padding=Symmetric,asymetric"): "did you mean +padding=symmetric,asymmetric?",
    ("padding.stem_conv=same",): "did you mean +padding.stem_conv=same?",
    ("root=/data/imagenet",): "did you mean data.root=/data/imagenet?",
    ("++data=synthetic",): "did you mean data=synthetic?",
    ("-m", "+padding=symmetric,tf_same[stem_pool=symmetric]"): "sweep a site with +padding.<site>=a,b",
    ("+padding=symmetric+blur(block_cnv)",): "unknown blur site(s) 'block_cnv'",
}
TRAIN_TYPOS = {  # eval.yaml has no optim, and no recipe is for it
    ("lr=-1",): "did you mean optim.lr=-1?",
    ("++experiment=fast",): "did you mean +experiment=fast?",
}


def run_app(config: str, args: tuple[str, ...], monkeypatch, capsys) -> tuple[int, str, list]:
    """The command's Hydra app (``hydra_command``, as resnet-train / resnet-eval) on ``args`` in this
    process, its work replaced by recording the config: (exit status, stderr, the configs run)."""
    from hydra.core.global_hydra import GlobalHydra

    ran: list = []
    monkeypatch.setattr(sys, "argv", [f"{config}.py", *args])
    # Hydra's logging set-up (logging.config.dictConfig) would close every handler there is, pytest's
    # own log capture among them: every later test of this worker would fail on its closed stream
    for module in (
        "hydra.main",
        "hydra.core.utils",
        "hydra._internal.hydra",
        "hydra._internal.core_plugins.basic_launcher",
    ):
        monkeypatch.setattr(importlib.import_module(module), "configure_log", lambda *args, **kwargs: None)
    try:
        hydra_command(config, f"resnet-{config}", ran.append)()
        code = 0
    except SystemExit as exit:
        code = exit.code
    finally:
        GlobalHydra.instance().clear()
    return code, capsys.readouterr().err, ran


@pytest.mark.parametrize(
    ("config", "args"),
    [(c, a) for c in ("train", "eval") for a in TYPOS] + [("train", a) for a in TRAIN_TYPOS],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else value,
)
def test_each_typo_is_one_line_with_status_2_saying_what_to_type(config, args, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    code, err, ran = run_app(config, args, monkeypatch, capsys)
    typed = next(a for a in args if a != "-m")  # the line starts with it
    assert (code, ran) == (2, []), (code, err)
    assert err.count("\n") == 1 and err.startswith(f"error: {typed}"), err
    assert {**TYPOS, **TRAIN_TYPOS}[args] in err, err


WORKS = {  # overrides -> the padding node they give (None: none); each leaves the run as typed
    ("++padding=asymmetric",): {"preset": "asymmetric"},
    ("++padding.block_conv_blur=true",): {"block_conv_blur": True},
    ("+padding=symmetric+blur(block_conv)",): {"preset": "symmetric", "block_conv_blur": True},
    ("++padding='symmetric+blur(block_conv)'",): {"preset": "symmetric", "block_conv_blur": True},
    ("+padding=keras", "++padding.stem_conv_blur=true"): {"preset": "keras", "stem_conv_blur": True},
    ("++hydra.run.dir=elsewhere",): None,
    ("+padding.stem_pool=same",): {"stem_pool": "same"},
}


@pytest.mark.parametrize(
    ("config", "args"),
    [(c, a) for c in ("train", "eval") for a in WORKS],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else value,
)
def test_a_plus_plus_on_a_group_or_existing_key_and_a_scheme_name_work(config, args):
    expanded = checked_overrides(args, config)
    cfg = compose_config(config, *expanded, hydra=True)
    node = padding_from_config(cfg)
    want = WORKS[args]
    assert (node is None) == (want is None) and all(node[k] == v for k, v in (want or {}).items()), node
    if "++hydra.run.dir=elsewhere" in args:
        assert cfg.hydra.run.dir == "elsewhere"


def test_a_plus_plus_sets_an_existing_key_and_a_sweep_of_presets_is_hydras():
    assert checked_overrides(["++optim.lr=0.1"], "train") == ["++optim.lr=0.1"]
    assert compose_config("train", "++optim.lr=0.1").optim.lr == 0.1
    assert checked_overrides(["++val_images=10"], "eval") == ["++val_images=10"]
    assert checked_overrides(["-m", "+padding=symmetric,asymmetric"], "train") == [
        "-m",
        "+padding=symmetric,asymmetric",
    ]
    assert checked_overrides(["-m", "++padding=symmetric,tf_same"], "eval") == ["-m", "+padding=symmetric,tf_same"]
    assert checked_overrides(["+padding=choice(symmetric,caffe)"], "eval") == ["+padding=choice(symmetric,caffe)"]
    assert checked_overrides(["--config-dir=/mine", "++mine=x"], "train") == ["--config-dir=/mine", "++mine=x"]
    # a key train.yaml has and eval.yaml has not: only the command's own config counts
    with pytest.raises(hydra_app.ConfigError, match="epochs"):
        checked_overrides(["++epochs=3"], "eval")


def test_a_per_site_scheme_name_becomes_the_overrides_that_select_it():
    # in any spelling Padding.name reads back (another base preset, another order): resnet.config.padding_overrides
    names = ["tf_same[stem_pool=symmetric]", "symmetric[stem_conv=same,block_conv=same]+blur(block_conv)"]
    for name in names:
        overrides = padding_overrides(name)
        assert overrides[0].startswith("+padding=") and len(overrides) > 1
        for typed in (f"+padding={name}", f"++padding={name}", f"+padding='{name}'", f'++padding="{name}"'):
            assert checked_overrides(["epochs=1", typed, "seed=3"], "train") == ["epochs=1", *overrides, "seed=3"]
        assert checked_overrides(["-m", f"+padding={name}", "seed=1,2"], "eval") == ["-m", *overrides, "seed=1,2"]
        cfg = compose_config("train", *overrides)
        assert resolve_padding(padding_from_config(cfg)) == resolve_padding(name)


SCHEMES = [  # Padding -> its name -> the command line -> the same Padding
    *PRESETS.values(),
    Padding("symmetric", "symmetric", "-inf", "symmetric", block_conv_blur=True),
    Padding("same", "symmetric", "-inf", "same"),
    Padding("same", "symmetric", "-inf", "same", stem_conv_blur=True, block_conv_blur=True),
    Padding("symmetric", "ceil", "-inf", "fixed"),
]


@pytest.mark.parametrize("padding", SCHEMES, ids=lambda padding: "-".join(map(str, padding.as_dict().values())))
def test_every_scheme_name_typed_on_the_command_line_selects_that_scheme(padding):
    cfg = compose_config("eval", *checked_overrides([f"+padding={padding.name}"], "eval"))
    assert resolve_padding(padding_from_config(cfg)) == padding


BOUNDED = ("epochs=1", "max_steps_per_epoch=1", "val_images=8", "data=synthetic")  # should a typo get through
PROCESS_RUNS = [  # a few rows of TYPOS as the commands run them (the checkout's scripts, the installed ones),
    # and what follows the row on the command line (after -m: Hydra's argparse takes no option between overrides)
    ([PY, REPO / "train.py"], ("++paddng=asymmetric",), BOUNDED),
    (["resnet-train"], ("+padding=symmetric", "+padding=asymmetric"), BOUNDED),
    ([PY, "-m", "resnet.cli.train"], ("lr=-1",), BOUNDED),
    ([PY, REPO / "eval.py"], ("-m", "+padding=symmetric,asymetric"), ("weights=x.pt",)),
    (["resnet-eval"], ("++paddng.stem_conv=same",), ("weights=x.pt",)),
    ([PY, "-m", "resnet.cli.eval"], ("padding.stem_conv=same",), ("weights=x.pt",)),
]


@pytest.mark.slow
def test_the_commands_as_run_end_a_typo_in_one_line_with_status_2(tmp_path):
    commands = [
        [procs.installed_script(c[0]) if c[0] != PY else PY, *c[1:], *args, *rest] for c, args, rest in PROCESS_RUNS
    ]
    done = procs.wait_all([procs.start(c, cwd=tmp_path) for c in commands], timeout=240)
    for (_command, args, _rest), proc in zip(PROCESS_RUNS, done):
        typed = next(a for a in args if a != "-m")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, (args, proc.returncode, proc.stderr[-2000:])
        assert proc.stderr.startswith(f"error: {typed}") and {**TYPOS, **TRAIN_TYPOS}[args] in proc.stderr, proc.stderr
