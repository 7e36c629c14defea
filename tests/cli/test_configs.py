"""The real configs compose, instantiate, and fail loudly on unknown names."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace

import pytest
import torch
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf import OmegaConf

import resnet
from resnet.config import ConfigError, padding_from_config
from resnet.engine.run import build_run_model, start_line
from resnet.engine.train_config import train_config
from resnet.padding import PRESETS, SITES
from resnet.runtime.distributed import DistEnv
from tests.helpers.compose import CONFIGS, compose_config

FILE_GROUPS = ("data", "optim", "sched", "logger", "experiment")  # one YAML per option


def compose_train(*overrides: str):
    """train.yaml as the app hands it to train(): its run_dir given (``${hydra:...}`` is a running app's)."""
    return compose_config("train", "run_dir=outputs/test", *overrides)


def resolved(cfg) -> dict:
    """Resolve the run config the way a run does."""
    return OmegaConf.to_container(cfg, resolve=True)


def test_padding_is_not_in_the_defaults():
    defaults = OmegaConf.load(CONFIGS / "train.yaml").defaults
    assert not any("padding" in str(d) for d in defaults)
    assert compose_train().get("padding") is None  # the model's native padding applies
    assert build_run_model(train_config(compose_train())).meta.padding_name == "symmetric"  # resnet_small's native


def test_train_yaml_holds_the_declared_default_of_every_key():
    # resnet.schema.KEYS declares each key once; train.yaml, the root config a user reads (its
    # comments, its defaults list without padding), is held to it here: no value of its own
    from resnet.config import AMP_DTYPES
    from resnet.schema import KEYS, NOT_IN_TRAIN_YAML, choices

    written = OmegaConf.to_container(OmegaConf.load(CONFIGS / "train.yaml"), resolve=False)
    written = {k: v for k, v in written.items() if k not in ("defaults", "hydra")}
    declared = {name: key.default for name, key in KEYS.items() if key.default is not NOT_IN_TRAIN_YAML}
    assert {k: (type(v), v) for k, v in written.items()} == {k: (type(v), v) for k, v in declared.items()}
    named = {name: key for name, key in KEYS.items() if choices(name) and key.default is not NOT_IN_TRAIN_YAML}
    assert all(key.default in choices(name) for name, key in named.items()), named
    assert tuple(AMP_DTYPES) == choices("amp")  # the autocast dtype of each name amp= takes


@pytest.mark.parametrize("group", FILE_GROUPS)
def test_every_option_composes(group):
    for option in sorted(p.stem for p in (CONFIGS / group).glob("*.yaml")):
        override = f"+{group}={option}" if group == "experiment" else f"{group}={option}"
        cfg = compose_train(override, "data.root=/tmp/none", "data.num_classes=3")
        assert OmegaConf.is_struct(cfg)
        resolved(cfg)  # every interpolation resolves


@pytest.mark.slow
def test_every_architecture_is_a_model_option_that_builds_it():
    for arch in resnet.list_archs():
        cfg = compose_train(f"model={arch}")
        assert cfg.model.arch == arch
        with torch.device("meta"):
            model = instantiate(cfg.model)
        assert model.meta.arch == arch and model.meta.num_classes == 10 and model.meta.in_chans == 1


@pytest.mark.parametrize("arch", ["resnet_tiny", "resnet_small", "resnet_tiny_v2", "resnet18", "resnet50_v2"])
def test_model_configs_instantiate(arch):
    cfg = compose_train(f"model={arch}")
    model = instantiate(cfg.model)
    assert model.meta.arch == arch
    assert model.fc.out_features == cfg.data.num_classes == 10
    assert model.conv1.in_channels == 1  # Fashion-MNIST is grey


def test_the_model_takes_the_datasets_facts_from_the_registry_or_an_override():
    model = instantiate(compose_train("data=synthetic", "model=resnet_tiny").model)  # ${dataset:...}: data/synthetic.py
    assert (model.fc.out_features, model.conv1.in_channels) == (10, 3)
    model = instantiate(compose_train("data=imagefolder", "data.root=/tmp/none", "data.num_classes=3").model)
    assert model.fc.out_features == 3
    with pytest.raises(
        Exception,
        match=re.escape(
            "${dataset:num_classes} reads num_classes, in_chans, image_size of "
            "an in-memory dataset of data/ (data.name), not num_classes of "
            "imagenet; write the value in the YAML instead"
        ),
    ):
        resolved(compose_train("data.name=imagenet"))


def test_model_keys_override_the_one_model_config():
    cfg = compose_train("model=resnet18", "model.zero_init_residual=true")
    model = instantiate(cfg.model)
    assert all((block.bn2.weight == 0).all() for block in (model.layer1[0], model.layer4[1]))
    assert compose_train("model.arch=resnet34").model.arch == "resnet34"  # the generic option


@pytest.mark.parametrize("preset", list(PRESETS))
def test_padding_options_build_their_preset(preset):
    cfg = compose_train(f"+padding={preset}")
    assert build_run_model(train_config(cfg)).meta.padding == PRESETS[preset]


def test_per_site_overrides():
    cfg = compose_train("+padding=symmetric", "padding.stem_pool=same")
    model = build_run_model(train_config(cfg))
    assert model.meta.padding.stem_pool == "same" and model.meta.padding_name == "symmetric[stem_pool=same]"
    assert model.meta.padding.stem_conv == "symmetric"
    # a single site over the model's native preset, without naming a preset
    cfg = compose_train("model=resnet50_v1", "+padding.stem_pool=valid")
    assert padding_from_config(cfg) == {"stem_pool": "valid"}
    assert build_run_model(train_config(cfg)).meta.padding == replace(PRESETS["caffe"], stem_pool="valid")


def test_every_site_can_be_overridden_after_a_preset():
    # Each value differs from the keras preset's, so an ignored override fails; -inf arrives
    # from the command line as a float, as a user types it, and True as a bool.
    changed = {
        "stem_conv": "valid",
        "stem_pool": "valid",
        "stem_pool_value": "-inf",
        "block_conv": "valid",
        "stem_conv_blur": True,
        "stem_pool_blur": True,
        "block_conv_blur": True,
    }
    assert set(changed) == set(SITES) and all(getattr(PRESETS["keras"], s) != v for s, v in changed.items())
    for site, value in changed.items():
        plus = "+" if site.endswith("_blur") else ""  # a preset has no blur slots (a recipe's blur survives it)
        padding = build_run_model(
            train_config(compose_train("+padding=keras", f"{plus}padding.{site}={value}"))
        ).meta.padding
        assert padding == replace(PRESETS["keras"], **{site: value}), site


def test_unknown_preset_lists_the_choices():
    with pytest.raises(ConfigCompositionException) as err:
        compose_train("+padding=asymetric")
    assert "asymmetric" in str(err.value.__cause__ or err.value)


def test_unknown_site_or_scheme_fails_before_any_work():
    cfg = compose_train("+padding=symmetric", "padding.stem_pool=sideways")
    with pytest.raises(ConfigError, match="stem_pool.*symmetric, same, ceil, valid"):
        train_config(cfg)
    cfg = compose_train("+padding.stem_poll=same")
    with pytest.raises(ConfigError, match="unknown padding site.*stem_pool"):
        train_config(cfg)


def test_unknown_keys_and_groups_fail():
    with pytest.raises(ConfigCompositionException):
        compose_train("epochz=3")  # struct mode: no new keys without '+'
    with pytest.raises(ConfigCompositionException) as err:
        compose_train("model=resnet51")
    assert "resnet50" in str(err.value)  # Hydra lists the available options
    with pytest.raises(ConfigError, match="unknown architecture 'resnet51'.*resnet50"):
        train_config(compose_train("model.arch=resnet51"))


@pytest.mark.parametrize(
    "override, message",
    [
        ("batch_size=-4", "batch_size=-4: expected a whole number >= 1, e.g. batch_size=128"),
        ("amp=fp8", "^amp=fp8: expected one of none, bf16, fp16, e.g. amp=none$"),
        ("on_nonfinite=ignore", "^on_nonfinite=ignore: expected one of stop, skip, e.g. on_nonfinite=stop$"),
        ("device=tpu", "^device=tpu: expected one of auto, cpu, cuda, e.g. device=auto$"),
        ("loss=mse", "^loss=mse: expected one of ce, bce, e.g. loss=ce$"),
        ("data_changed=x", "^data_changed=x: expected one of refuse, rescale, e.g. data_changed=refuse$"),
        ("data.decode=gpux", "^data.decode=gpux: expected one of cpu, gpu, e.g. data.decode=cpu$"),
        ("data.interpolation=bicubik", "^data.interpolation=bicubik: expected one of bilinear, bicubic, e.g. "),
    ],
)
def test_bad_values_fail_with_one_line(override, message):
    with pytest.raises(ConfigError, match=message):
        train_config(compose_train(override))


def test_every_recipe_command_composes():
    """Each experiment config documents the command that runs it; that command must compose."""
    for path in sorted((CONFIGS / "experiment").glob("*.yaml")):
        command = re.search(r"^# Command:\s+(.*?train\.py .*)$", path.read_text(), re.M)
        assert command, f"{path.name} has no '# Command: ... train.py ...' line"
        args = shlex.split(command.group(1).split("train.py", 1)[1])
        overrides = [a.strip("[]") for a in args if "=" in a]  # [optional] arguments included
        assert f"+experiment={path.stem}" in overrides, f"{path.name}'s command does not select it"
        cfg = compose_train(*overrides)
        resolved(cfg)
        assert cfg.model.arch in resnet.list_archs()


def test_the_evaluation_protocol_is_written_once_and_read_by_each_command():
    protocol = OmegaConf.load(CONFIGS / "protocol" / "eval.yaml")
    assert set(protocol) == {"crop", "resize", "crop_pct", "interpolation", "preprocessing"}
    for name, required in (("eval", ["weights=w"]), ("detect", ["weights=w"]), ("regrid", ["weights=w", "out=o.pt"])):
        assert not set(protocol) & set(OmegaConf.load(CONFIGS / f"{name}.yaml")), f"{name}.yaml repeats the protocol"
        cfg = compose_config(name, *required, "crop=200", "interpolation=bicubic")
        assert (cfg.crop, cfg.interpolation, cfg.resize, cfg.crop_pct, cfg.preprocessing) == (200, "bicubic", None,
                                                                                               None, None)  # fmt: skip


def test_the_weights_a_command_reads_are_configured_once():
    # configs/weights_input/weights.yaml: weights=, ema=, download= and the optional model=<arch>, for each
    # command that reads one set of weights; no command writes those keys again itself
    shared = OmegaConf.load(CONFIGS / "weights_input" / "weights.yaml")
    keys = set(shared) - {"defaults"}
    assert keys == {"weights", "ema", "download"}
    for name, required in (("eval", []), ("detect", []), ("regrid", ["out=o.pt"]), ("export", ["out=o.onnx"])):
        assert not keys & set(OmegaConf.load(CONFIGS / f"{name}.yaml")), f"{name}.yaml repeats the weights keys"
        cfg = compose_config(name, "weights=w", *required)
        assert (cfg.weights, cfg.ema, cfg.download, cfg.get("model")) == ("w", False, False, None)
        chosen = compose_config(name, "weights=w", *required, "model=resnet50", "ema=true", "download=true")
        assert (chosen.model.arch, chosen.ema, chosen.download) == ("resnet50", True, True)


def test_the_commands_that_write_only_out_share_one_hydra_block():
    # configs/hydra_output/writes_only_out.yaml: no run folder, no .hydra/ copy, for each command that
    # includes it, and no command writes the block again itself
    from resnet.config import compose

    shared = OmegaConf.load(CONFIGS / "hydra_output" / "writes_only_out.yaml")
    for name, required in (("detect", ["weights=w"]), ("regrid", ["weights=w", "out=o.pt"]),
                           ("export", ["weights=w", "out=o.onnx"])):  # fmt: skip
        own = OmegaConf.load(CONFIGS / f"{name}.yaml").hydra
        assert set(own) == {"job"}, f"{name}.yaml repeats the shared block: {set(own)}"
        hydra = compose(name, *required, hydra=True).hydra
        assert (hydra.output_subdir, hydra.run.dir, hydra.job.name) == (shared.output_subdir, ".", name)
    assert compose("eval", "weights=w", hydra=True).hydra.output_subdir == ".hydra"  # eval keeps its run folder


@pytest.mark.parametrize(
    "overrides, says",
    [
        ([], "with padding symmetric (its native padding) on"),
        (["model=resnet50_v1"], "with padding caffe (its native padding) on"),
        (["+padding=asymmetric"], "with padding asymmetric on"),
        # one site over a v1 model's native caffe, not over symmetric: the name says what is built
        (["model=resnet50_v1", "+padding.block_conv=same"],
         "with padding caffe[block_conv=same] (+padding=caffe +padding.block_conv=same) on"),
        (["+padding.stem_conv=same", "+padding.block_conv=same"],
         "with padding tf_same[stem_pool=symmetric] (+padding=tf_same +padding.stem_pool=symmetric) on"),
        (["grid=[symmetric,asymmetric]"], "with grid[symmetric,asymmetric] on"),
    ],
)  # fmt: skip
def test_the_start_line_names_the_scheme_built_and_how_to_select_it_again(overrides, says, tmp_path):
    cfg = compose_train(*overrides)
    line = start_line(train_config(cfg), DistEnv(0, 1, 0, torch.device("cpu")), tmp_path)
    assert says in line, line
    if "(+padding=" in says:  # the overrides it prints select the same scheme
        again = compose_train(
            *[o for o in overrides if o.startswith("model=")], *says.split("(")[1].split(")")[0].split()
        )
        assert build_run_model(train_config(again)).meta.padding == build_run_model(train_config(cfg)).meta.padding
