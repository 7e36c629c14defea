"""The four ImageNet recipes (configs/experiment/): each composes with every padding preset, and
each runs 2 steps on tiny generated data with every component it names active, built from
torch/torchvision/timm.

A spy on ``train_one_epoch`` sees what the trainer built (model, loader, optimizer, schedule,
loss, batch augmentation, EMA), so the checks are on the objects that trained, not on the config.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from timm.data.distributed_sampler import RepeatAugSampler
from timm.data.random_erasing import RandomErasing
from timm.layers import BlurPool2d
from timm.loss import BinaryCrossEntropy, SoftTargetCrossEntropy
from timm.optim import Lamb
from torch.optim import lr_scheduler
from torchvision.transforms.v2 import TrivialAugmentWide

import resnet.engine.run
from resnet import PRESETS
from resnet.checkpoint import load_checkpoint
from resnet.config import padding_from_config, register_configs
from resnet.engine.run import train
from resnet.padding import resolve_padding
from tests.helpers.compose import CONFIGS, compose_config

RECIPES = ("tv_v1", "tv_v2", "timm_a3", "fast")
TINY = (
    "model=resnet_tiny",
    "data.num_classes=3",
    "data.workers=0",
    "batch_size=4",
    "epochs=2",
    "max_steps_per_epoch=1",
    "data.image_size=32",
    "data.val_size=40",
    "log_every=1",
    "device=cpu",
)


def test_the_recipes_are_the_experiment_configs():
    assert sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml")) == sorted({*RECIPES, "demo"})


def test_each_recipe_composes_with_every_padding_preset():
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):  # once: composing is then ~50 ms
        for recipe in RECIPES:
            for preset in PRESETS:  # every preset after the recipe, and one before it (the order must not matter)
                orders = [[f"+experiment={recipe}", f"+padding={preset}"]]
                if preset == "tf_slim":
                    orders.append(list(reversed(orders[0])))
                for order in orders:
                    padding = resolve_padding(padding_from_config(compose(config_name="train", overrides=order)))
                    assert replace(padding, block_conv_blur=False) == PRESETS[preset], (recipe, order)
                    assert padding.block_conv_blur is (recipe == "fast")  # the recipe's BlurPool survives +padding=


def run_recipe(recipe: str, root: Path, run_dir: Path, monkeypatch, *extra: str) -> tuple[list[dict], dict]:
    """Train ``recipe`` for 2 steps (1 per epoch); return what each epoch trained with, and the results."""
    seen, built, validations = [], [], []
    real_epoch, real_loaders, real_evaluate = (
        resnet.engine.run.train_one_epoch,
        resnet.engine.run.make_loaders,
        resnet.engine.run.evaluate,
    )

    def epoch_spy(model, loader, optimizer, scheduler, ctx, *args, **kwargs):
        seen.append(
            {
                "model": model,
                "loader": loader,
                "optimizer": optimizer,
                "scheduler": scheduler,
                "ctx": ctx,
                "size": getattr(loader.dataset.transform, "size", None),
                "loaders": built[0],
                "validations": validations,
            }
        )
        return real_epoch(model, loader, optimizer, scheduler, ctx, *args, **kwargs)

    def loaders_spy(*args, **kwargs):
        built.append(real_loaders(*args, **kwargs))
        return built[-1]

    def evaluate_spy(*args, **kwargs):
        validations.append(kwargs)
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(resnet.engine.run, "train_one_epoch", epoch_spy)
    monkeypatch.setattr(resnet.engine.run, "make_loaders", loaders_spy)
    monkeypatch.setattr(resnet.engine.run, "evaluate", evaluate_spy)
    cfg = compose_config(
        "train", f"+experiment={recipe}", "+padding=symmetric", f"data.root={root}", f"run_dir={run_dir}", *TINY, *extra
    )
    results = train(cfg)
    return seen, results


def transforms_of(loader) -> str:
    return repr(loader.dataset.transform)


def test_tv_v1(tiny_folder, tmp_path, monkeypatch):
    seen, results = run_recipe("tv_v1", tiny_folder, tmp_path, monkeypatch)
    first = seen[0]
    optimizer = first["optimizer"]
    assert type(optimizer) is torch.optim.SGD and len(optimizer.param_groups) == 1  # every parameter decays
    assert optimizer.param_groups[0]["weight_decay"] == 1e-4 and not optimizer.param_groups[0]["nesterov"]
    assert type(first["scheduler"]) is lr_scheduler.MultiStepLR
    assert isinstance(first["ctx"].loss_fn, torch.nn.CrossEntropyLoss) and first["ctx"].loss_fn.label_smoothing == 0
    assert first["ctx"].augment is None and first["ctx"].ema is None
    assert first["ctx"].runtime.amp_dtype is torch.bfloat16
    assert results["amp"] == "bf16" and results["top1_err"] is not None


def test_tv_v2(tiny_folder, tmp_path, monkeypatch):
    seen, results = run_recipe("tv_v2", tiny_folder, tmp_path, monkeypatch)
    first = seen[0]
    loader, ctx, optimizer = first["loader"], first["ctx"], first["optimizer"]
    assert isinstance(loader.dataset.transform.policy, TrivialAugmentWide)
    assert isinstance(loader.sampler.inner, RepeatAugSampler) and loader.sampler.inner.num_repeats == 4
    assert isinstance(ctx.augment.erasing, RandomErasing) and ctx.augment.erasing.probability == 0.1
    assert ctx.augment.mixup.mixup_alpha == 0.2 and ctx.augment.mixup.cutmix_alpha == 1.0
    assert isinstance(ctx.loss_fn, SoftTargetCrossEntropy) and ctx.augment.mixup.label_smoothing == 0.1
    assert ctx.ema is not None and ctx.ema_every == 32 and ctx.ema.decay == pytest.approx(0.99997**32)  # per update
    scheduler = first["scheduler"]
    assert type(scheduler) is lr_scheduler.SequentialLR
    assert [type(s) for s in scheduler._schedulers] == [lr_scheduler.LinearLR, lr_scheduler.CosineAnnealingLR]
    no_decay = [g for g in optimizer.param_groups if g["weight_decay"] == 0]
    norms = {id(p) for m in first["model"].modules() if isinstance(m, torch.nn.BatchNorm2d) for p in m.parameters()}
    assert {id(p) for p in no_decay[0]["params"]} == norms  # norm layers by type; the fc bias still decays
    val_transform = repr(first["loaders"].val.dataset.transform)
    assert "ResizeCenterCrop(resize=41, size=40" in val_transform  # the train/test split: 32 / 40 (crop_pct 0.9655)
    assert results["ema_top1_err"] is not None and "ema" in load_checkpoint(tmp_path / "last.pt")


def test_timm_a3(tiny_folder, tmp_path, monkeypatch):
    seen, results = run_recipe("timm_a3", tiny_folder, tmp_path, monkeypatch)
    first = seen[0]
    ctx = first["ctx"]
    assert type(first["optimizer"]) is Lamb
    assert isinstance(ctx.loss_fn, BinaryCrossEntropy) and ctx.loss_fn.target_threshold == 0.2
    assert "auto_augment(rand-m6-mstd0.5-inc1)" in transforms_of(first["loader"])
    assert "interpolation='bicubic'" in transforms_of(first["loader"])
    assert ctx.augment.erasing is None
    assert ctx.augment.mixup.mixup_alpha == 0.1 and ctx.augment.mixup.cutmix_alpha == 1.0
    assert results["top1_err"] is not None


def test_fast(tiny_folder, tmp_path, monkeypatch):
    grow = "data.progressive_resize={start_size:32,end_size:48,start_epoch:0,end_epoch:1,step:16}"
    # 2 steps per epoch here: OneCycleLR needs 3 steps or more for its two phases
    seen, results = run_recipe("fast", tiny_folder, tmp_path, monkeypatch, grow, "max_steps_per_epoch=2")
    assert [epoch["size"] for epoch in seen] == [32, 48]  # progressive resizing, per epoch
    first = seen[0]
    assert type(first["scheduler"]) is lr_scheduler.OneCycleLR
    assert isinstance(first["ctx"].loss_fn, torch.nn.CrossEntropyLoss) and first["ctx"].loss_fn.label_smoothing == 0.1
    assert any(isinstance(m, BlurPool2d) for m in first["model"].modules())
    meta = load_checkpoint(tmp_path / "last.pt")["meta"]
    assert meta["padding"]["block_conv_blur"] is True and "blur" in meta["padding_name"]
    assert {v.get("crops") for v in first["validations"]} == {2}  # each val image and its flip
    assert "ResizeCenterCrop(resize=45, size=40" in repr(first["loaders"].val.dataset.transform)  # crop_pct 0.875
    assert results["n_val_images"] == 7 and results["padding_name"] == meta["padding_name"]


def test_recipe_headers_say_command_hardware_result_and_time():
    for recipe in RECIPES:
        head = (CONFIGS / "experiment" / f"{recipe}.yaml").read_text().split("defaults:")[0]
        for field in ("# Command:", "# Hardware:", "# Published:", "# Wall time:"):
            assert field in head, f"{recipe}.yaml lacks {field}"
        assert f"+experiment={recipe}" in head
    assert OmegaConf.load(CONFIGS / "experiment" / "fast.yaml").padding.block_conv_blur is True
