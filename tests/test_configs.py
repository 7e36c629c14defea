"""The real configs compose, instantiate, and fail loudly on unknown names."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf import OmegaConf

import resnet
from resnet.engine.run import _check_config, build_run_model, padding_spec
from resnet.padding import PRESETS, resolve_padding

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
GROUPS = ("model", "data", "optim", "sched", "logger", "padding", "experiment")


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


def compose_train(*overrides: str):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides), return_hydra_config=True)


def resolved(cfg) -> dict:
    """Resolve the run config the way a run does (hydra:runtime is not set by compose)."""
    cfg = cfg.copy()
    OmegaConf.set_struct(cfg, False)
    cfg.run_dir = "outputs/test"
    cfg.pop("hydra")
    return OmegaConf.to_container(cfg, resolve=True)


def test_padding_is_not_in_the_defaults():
    defaults = OmegaConf.load(CONFIGS / "train.yaml").defaults
    assert not any("padding" in str(d) for d in defaults)
    assert compose_train().get("padding") is None  # the model's native padding applies


@pytest.mark.parametrize("group", GROUPS)
def test_every_option_composes(group):
    for option in options(group):
        override = f"+{group}={option}" if group in ("padding", "experiment") else f"{group}={option}"
        cfg = compose_train(override, "data.root=/tmp/none", "data.num_classes=3")
        assert OmegaConf.is_struct(cfg)
        resolved(cfg)  # every interpolation resolves


def test_every_architecture_has_a_model_config():
    assert set(options("model")) == set(resnet.list_archs())


@pytest.mark.parametrize("arch", ["resnet_tiny", "resnet_small", "resnet_tiny_v2", "resnet18", "resnet50_v2"])
def test_model_configs_instantiate(arch):
    cfg = compose_train(f"model={arch}")
    model = instantiate(cfg.model)
    assert model.meta.arch == arch
    assert model.fc.out_features == cfg.data.num_classes == 10
    assert model.conv1.in_channels == 1  # Fashion-MNIST is grey


def test_all_model_configs_instantiate_on_meta_device():
    import torch

    for arch in options("model"):
        with torch.device("meta"):
            model = instantiate(compose_train(f"model={arch}").model)
        assert model.meta.arch == arch


@pytest.mark.parametrize("preset", list(PRESETS))
def test_padding_configs_equal_the_presets(preset):
    cfg = compose_train(f"+padding={preset}")
    assert resolve_padding(padding_spec(cfg)) == PRESETS[preset]
    assert build_run_model(cfg).meta.padding == PRESETS[preset].as_dict()


def test_per_site_overrides():
    cfg = compose_train("+padding=symmetric", "padding.stem_pool=same")
    model = build_run_model(cfg)
    assert model.meta.padding["stem_pool"] == "same" and model.meta.padding_name == "custom"
    # a single site over the model's native preset, without naming a preset
    cfg = compose_train("model=resnet50_v1", "+padding.stem_pool=valid")
    assert resolve_padding(padding_spec(cfg), native="caffe").stem_pool == "valid"
    assert build_run_model(cfg).meta.padding["stem_conv"] == "symmetric"


def test_unknown_preset_lists_the_choices():
    with pytest.raises(ConfigCompositionException) as err:
        compose_train("+padding=asymetric")
    assert "asymmetric" in str(err.value.__cause__ or err.value)


def test_unknown_site_or_scheme_fails_before_any_work():
    cfg = compose_train("+padding=symmetric", "padding.stem_pool=sideways")
    with pytest.raises(ValueError, match="stem_pool.*symmetric, same, ceil, valid"):
        _check_config(cfg)
    cfg = compose_train("+padding.stem_poll=same")
    with pytest.raises(ValueError, match="unknown padding site.*stem_pool"):
        _check_config(cfg)


def test_unknown_keys_and_groups_fail():
    with pytest.raises(ConfigCompositionException):
        compose_train("epochz=3")  # struct mode: no new keys without '+'
    with pytest.raises(ConfigCompositionException) as err:
        compose_train("model=resnet51")
    assert "resnet50" in str(err.value)  # Hydra lists the available options


@pytest.mark.parametrize(
    "override, message",
    [("batch_size=-4", "batch_size must be positive"), ("amp=fp8", "amp"), ("on_nonfinite=ignore", "stop or skip")],
)
def test_bad_values_fail_with_one_line(override, message):
    with pytest.raises(ValueError, match=message):
        _check_config(compose_train(override))


def test_recipes_start_with_command_hardware_and_expectation():
    for path in (CONFIGS / "experiment").glob("*.yaml"):
        head = path.read_text().split("defaults:")[0]
        for word in ("Command:", "Hardware:", "Expected:"):
            assert word in head, f"{path.name} lacks '{word}' in its header comment"
