"""Each training feature does what it says, on CPU: bf16 autocast, fp16 with a GradScaler through
a resume, channels_last, torch.compile, mixup / cutmix / label smoothing, weight decay kept off
norms and biases, frozen BN.

Most tests call ``train_one_epoch`` or the library pieces on random tensors; only the GradScaler
test runs ``train()`` (three tiny runs, shared by a module fixture).
"""

from __future__ import annotations

import copy
import math
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from data import Normalize
from resnet import build_model
from resnet.checkpoint import load_checkpoint
from resnet.engine.loop import EpochStats, StepContext, train_one_epoch
from resnet.engine.losses import LossConfig, loss_and_augment
from resnet.engine.optim import build_optimizer
from resnet.runtime.device import Runtime
from tests.helpers.imagegen import make_tiny_folder
from tests.helpers.training import run_in_process

pytestmark = pytest.mark.usefixtures("one_thread")

NUM_CLASSES = 3
BatchNorm = nn.modules.batchnorm._BatchNorm


def tiny_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_model("resnet_tiny", num_classes=NUM_CLASSES)


def tiny_batch(n: int = 4, size: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 NCHW images and labels, as the loaders give them. At 16 px resnet_tiny's last stage
    is 2 x 2 x 64: no activation is both contiguous and channels_last by accident."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=generator)
    return images, torch.randint(0, NUM_CLASSES, (n,), generator=generator)


def one_epoch(model: nn.Module, batches: list, runtime: Runtime | None = None, **ctx_options) -> EpochStats:
    """``train_one_epoch`` over ``batches`` as ``train()`` sets it up: the model placed by the
    runtime, SGD with momentum, a constant schedule, torch preprocessing, one history row per step."""
    runtime = runtime or Runtime.local()
    model = runtime.place(model)  # in place: the caller's module
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    ctx = StepContext(
        runtime=runtime,
        normalize=Normalize("torch"),
        loss_fn=nn.CrossEntropyLoss(),
        log_every=1,
        progress=False,
        **{"on_nonfinite": "stop", **ctx_options},
    )
    return train_one_epoch(model, batches, optimizer, scheduler, ctx, epoch=0, global_step=0)


def record_convs(model: nn.Module, what) -> list:
    """``what(input, output)`` of every conv's forward, in call order."""
    seen: list = []
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            m.register_forward_hook(lambda module, args, output: seen.append(what(args[0], output)))
    return seen


def n_convs(model: nn.Module) -> int:
    return sum(isinstance(m, nn.Conv2d) for m in model.modules())


# --- bf16 autocast -----------------------------------------------------------------------------


def test_bf16_autocast_runs_the_convs_in_bf16_with_a_loss_close_to_float32():
    base, batch = tiny_model(), tiny_batch()
    fp32, bf16 = copy.deepcopy(base), copy.deepcopy(base)
    fp32_dtypes = record_convs(fp32, lambda x, out: out.dtype)
    bf16_dtypes = record_convs(bf16, lambda x, out: out.dtype)
    ref = one_epoch(fp32, [batch])
    got = one_epoch(bf16, [batch], replace(Runtime.local(), amp_dtype=torch.bfloat16))

    assert fp32_dtypes == [torch.float32] * n_convs(base)
    assert bf16_dtypes == [torch.bfloat16] * n_convs(base)  # every conv, once
    assert got.steps == 1 and math.isfinite(got.loss)
    # Same weights, same batch: bf16's 8-bit mantissa moves the loss by well under 2 %, but it moves it.
    assert got.loss == pytest.approx(ref.loss, rel=2e-2) and got.loss != ref.loss
    for name, p in bf16.named_parameters():
        assert p.dtype == torch.float32, name  # float32 master weights, updated by the step
    assert not torch.equal(base.conv1.weight, bf16.conv1.weight)


# --- fp16 with a GradScaler, through train() and a resume ---------------------------------------

FP16 = ("amp=fp16", "seed=3", "epochs=2")


@pytest.fixture(scope="module")
def fp16_runs(tmp_path_factory):
    """train() with amp=fp16 straight through 2 epochs, and the same split: stop_after=1, then
    resume=true. Returns the two run dirs, epoch 1's scaler state as saved, and what every
    GradScaler.load_state_dict call received."""
    root = tmp_path_factory.mktemp("fp16")
    folder = make_tiny_folder(root / "data")
    run_in_process(folder, root / "straight", *FP16)
    run_in_process(folder, root / "split", *FP16, "stop_after=1")
    saved = load_checkpoint(root / "split" / "last.pt")
    loaded: list[dict] = []
    original = torch.amp.GradScaler.load_state_dict

    def spy(self, state_dict):
        loaded.append(copy.deepcopy(state_dict))
        return original(self, state_dict)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.amp.GradScaler, "load_state_dict", spy)
        run_in_process(folder, root / "split", *FP16, "resume=true")
    yield {"straight": root / "straight", "split": root / "split", "saved": saved, "loaded": loaded}
    shutil.rmtree(root, ignore_errors=True)


def test_fp16_checkpoint_holds_the_grad_scaler_state(fp16_runs):
    saved = fp16_runs["saved"]
    assert saved["epoch"] == 1 and saved["config"]["amp"] == "fp16"
    scaler = saved["scaler"]
    assert isinstance(scaler["scale"], float) and scaler["scale"] > 0
    # The scaler was stepped: one growth-tracker tick per step without inf/NaN gradients. Not the
    # fresh scaler's state, so a resume that dropped it would show below.
    assert 0 < scaler["_growth_tracker"] <= saved["step"] == 6
    assert scaler != torch.amp.GradScaler("cpu").state_dict()


def test_fp16_resume_restores_the_scaler_and_ends_bit_identical(fp16_runs):
    saved = fp16_runs["saved"]
    a = load_checkpoint(fp16_runs["straight"] / "last.pt")
    b = load_checkpoint(fp16_runs["split"] / "last.pt")
    assert a["epoch"] == b["epoch"] == 2 and a["step"] == b["step"] == 12
    for key, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][key]), key
    assert fp16_runs["loaded"] == [saved["scaler"]]  # the resumed run loaded epoch 1's scaler, once
    assert b["scaler"] == a["scaler"]  # and went on from it: a fresh scaler would count fewer steps
    assert a["scaler"]["_growth_tracker"] > saved["scaler"]["_growth_tracker"]


# --- channels_last -----------------------------------------------------------------------------


def test_channels_last_gives_the_contiguous_loss_and_gradients():
    base, batch = tiny_model(), tiny_batch()
    nchw, nhwc = copy.deepcopy(base), copy.deepcopy(base)

    def is_nhwc(x, out):
        return x.is_contiguous(memory_format=torch.channels_last), out.is_contiguous(memory_format=torch.channels_last)

    nchw_formats, nhwc_formats = record_convs(nchw, is_nhwc), record_convs(nhwc, is_nhwc)
    ref = one_epoch(nchw, [batch])
    got = one_epoch(nhwc, [batch], replace(Runtime.local(), channels_last=True))

    # Every conv's input (the normalised batch for the stem's) and output is NHWC in memory; and
    # the check tells the formats apart at these sizes.
    assert nhwc_formats == [(True, True)] * n_convs(base)
    assert nchw_formats == [(False, False)] * n_convs(base)
    assert nhwc.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert got.loss == pytest.approx(ref.loss, abs=1e-5)
    for (name, p), q in zip(nchw.named_parameters(), nhwc.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)  # the step's gradients


# --- torch.compile -----------------------------------------------------------------------------


@pytest.mark.slow  # C++ kernels compiled cold: about 35 s on 2 cores, scheduled first
@pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None,
    reason="torch.compile's default backend (inductor) compiles C++ kernels: no C compiler here",
)
def test_torch_compile_gives_the_eager_outputs(monkeypatch):
    # The layers this project adds, under inductor (what compile=true uses): a SAME conv and a SAME
    # max pool, whose pads depend on the input size, with BN, ReLU and a head. 17 px: odd, so the
    # conv pads (1, 1) and the pool then sees 9, odd again. Eval mode and forward only: each further
    # kernel costs a C++ compile (~1 s here; a fwd+bwd train step of resnet_tiny took 31 s cold), so the
    # train-mode graph is checked below with the aot_eager backend (no C++), through our whole model.
    import torch._dynamo
    import torch._inductor.config

    from resnet.padding import make_conv, make_max_pool

    monkeypatch.setattr(torch._inductor.config, "compile_threads", 1)  # compile here, not in a worker pool
    torch.manual_seed(0)
    layers = nn.Sequential(
        make_conv("same", 3, 8, 3, 2),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        make_max_pool("same"),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, NUM_CLASSES),
    )
    with torch.no_grad():
        layers[1].running_mean.uniform_(-0.5, 0.5)
        layers[1].running_var.uniform_(0.5, 2.0)
    layers.eval()
    x = torch.randn(4, 3, 17, 17, generator=torch.Generator().manual_seed(1))
    try:
        with torch.no_grad():
            torch.testing.assert_close(torch.compile(layers)(x), layers(x), rtol=1e-4, atol=1e-5)
    finally:
        torch._dynamo.reset()


def test_a_compiled_training_step_gives_the_eager_loss_and_weights():
    # dynamo's graph capture and AOT autograd (the parts of torch.compile that see our modules: the
    # SAME pads of tf_same are size-dependent Python) on resnet_tiny's training step, with the
    # aot_eager backend: the same graphs inductor would compile, run by eager kernels.
    import torch._dynamo

    torch.manual_seed(0)
    eager = build_model("resnet_tiny", num_classes=NUM_CLASSES, padding="tf_same")
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, backend="aot_eager")
    x = Normalize("torch")(tiny_batch(size=17)[0])
    y = tiny_batch()[1]
    try:
        losses = []
        for net, params in ((compiled, model.parameters()), (eager, eager.parameters())):
            optimizer = torch.optim.SGD(params, lr=0.1, momentum=0.9)
            out = net(x)  # train mode: BN batch statistics, as in training
            loss = F.cross_entropy(out, y)
            loss.backward()
            optimizer.step()
            losses.append((out.detach(), loss.item(), F.cross_entropy(net(x), y).item()))
        (out_c, before_c, after_c), (out_e, before_e, after_e) = losses
        torch.testing.assert_close(out_c, out_e, rtol=1e-4, atol=1e-4)
        assert before_c == pytest.approx(before_e, abs=1e-4)
        assert after_c == pytest.approx(after_e, abs=1e-4) and after_e != before_e  # the step changed the loss
        for (name, p), q in zip(eager.named_parameters(), model.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5, msg=name)
    finally:
        torch._dynamo.reset()


# --- mixup, cutmix, label smoothing ------------------------------------------------------------


def trainer_mixing(mixup: float, cutmix: float, label_smoothing: float):
    """(loss_fn, batch augmentation) as train() builds them from these config values (loss=ce, no
    random erasing: the augmentation is timm's Mixup/CutMix alone, or None)."""
    config = LossConfig(
        loss="ce",
        label_smoothing=label_smoothing,
        bce_target_threshold=None,
        mixup=mixup,
        cutmix=cutmix,
        random_erasing=0.0,
    )
    return loss_and_augment(config, NUM_CLASSES, torch.device("cpu"))


def smoothed_onehot(y: torch.Tensor, eps: float) -> torch.Tensor:
    return F.one_hot(y, NUM_CLASSES).float() * (1 - eps) + eps / NUM_CLASSES


def smoothed_ce(logits: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
    """Label-smoothed cross-entropy by hand: (1 - eps) x CE + eps x the mean of -log p over classes (and batch)."""
    logp = F.log_softmax(logits, dim=1)
    return (1 - eps) * -logp[torch.arange(len(y)), y].mean() + eps * -logp.mean()


def marked_batch(n: int = 4, h: int = 12, w: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Random images in [0.25, 0.75) except the first (all ones) and the last (all zeros): what
    the first image holds after mixing says how much of the last one it took."""
    generator = torch.Generator().manual_seed(7)
    x = torch.rand(n, 3, h, w, generator=generator) * 0.5 + 0.25
    x[0], x[-1] = 1.0, 0.0
    return x, torch.tensor([0, 1, 2, 1])  # y and y.flip(0) differ at every position


def seed_numpy_and_torch(value: int) -> None:
    np.random.seed(value)  # timm draws lambda (and mixup vs cutmix) with numpy
    torch.manual_seed(value)


@pytest.mark.parametrize("seed, eps", [(0, 0.0), (3, 0.1)])
def test_mixup_blends_with_the_mirrored_batch_and_the_loss_by_the_same_lambda(seed, eps):
    loss_fn, mixup = trainer_mixing(0.8, 0.0, eps)
    x, y = marked_batch()
    seed_numpy_and_torch(seed)
    mixed, target = mixup(x.clone(), y)
    lam = mixed[0].mean().item()  # lam * 1 + (1 - lam) * 0
    assert 0.05 < lam < 0.95  # a real blend at these seeds
    torch.testing.assert_close(mixed, lam * x + (1 - lam) * x.flip(0))
    torch.testing.assert_close(target, lam * smoothed_onehot(y, eps) + (1 - lam) * smoothed_onehot(y.flip(0), eps))
    logits = torch.randn(len(y), NUM_CLASSES, generator=torch.Generator().manual_seed(seed))
    expected = lam * smoothed_ce(logits, y, eps) + (1 - lam) * smoothed_ce(logits, y.flip(0), eps)
    torch.testing.assert_close(loss_fn(logits, target), expected)
    if eps == 0:  # the plain form: a lam-weighted sum of two cross-entropies
        plain = lam * F.cross_entropy(logits, y) + (1 - lam) * F.cross_entropy(logits, y.flip(0))
        torch.testing.assert_close(loss_fn(logits, target), plain)


def test_label_smoothing_is_cross_entropy_mixed_with_the_uniform_distribution():
    eps = 0.1
    loss_fn, mixup = trainer_mixing(0.0, 0.0, eps)
    assert mixup is None
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(6, NUM_CLASSES, generator=generator) * 3
    y = torch.randint(0, NUM_CLASSES, (6,), generator=generator)
    by_hand = (1 - eps) * F.cross_entropy(logits, y) + eps * -F.log_softmax(logits, dim=1).mean()
    torch.testing.assert_close(loss_fn(logits, y), by_hand)
    assert abs(loss_fn(logits, y).item() - F.cross_entropy(logits, y).item()) > 1e-2  # smoothing did something


@pytest.mark.parametrize("seed", [0, 2])  # both boxes are clipped at the border: timm's correction matters
def test_cutmix_pastes_one_box_of_the_mirrored_batch_and_weights_targets_by_its_area(seed):
    _, cutmix = trainer_mixing(0.0, 1.0, 0.0)
    x, y = marked_batch()
    seed_numpy_and_torch(seed)
    mixed, target = cutmix(x.clone(), y)
    box = mixed[0, 0] == 0  # where the first image (ones) took the last one's (zeros) pixels
    rows, cols = box.any(1).nonzero().flatten(), box.any(0).nonzero().flatten()
    assert len(rows) and len(cols)
    rectangle = torch.zeros_like(box)
    rectangle[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1] = True
    assert torch.equal(box, rectangle)  # one box, the same in every image and channel:
    torch.testing.assert_close(mixed, torch.where(box, x.flip(0), x), rtol=0, atol=0)
    lam = target[0, y[0]].item()  # smoothing 0: lam on y, 1 - lam on y.flip(0)
    taken = box.float().mean().item()
    assert 0 < taken < 1
    assert taken == pytest.approx(1 - lam, abs=1e-6)  # lam is the box's area, as timm corrects it
    torch.testing.assert_close(target, lam * smoothed_onehot(y, 0) + (1 - lam) * smoothed_onehot(y.flip(0), 0))


# --- weight decay kept off norms and biases ----------------------------------------------------

WEIGHT_DECAY = 0.01


def decays(module: nn.Module, name: str, rule: str) -> bool:
    """Whether ``rule`` (optim.no_weight_decay) decays ``module``'s parameter ``name``, by module type."""
    if rule == "none":
        return True
    if isinstance(module, BatchNorm):
        return False
    assert isinstance(module, (nn.Conv2d, nn.Linear)), f"a parameter of {type(module).__name__}: which rule?"
    return name == "weight" or rule == "norm"  # norm_and_bias: conv/linear biases are kept off too


@pytest.mark.parametrize("rule", ["norm_and_bias", "norm", "none"])
def test_weight_decay_groups_and_one_step_follow_the_rule(rule):
    model = tiny_model()
    cfg = {
        "name": "sgd",
        "lr": 0.1,
        "momentum": 0.9,
        "nesterov": False,
        "weight_decay": WEIGHT_DECAY,
        "no_weight_decay": rule,
        "ref_batch": 256,
    }
    optimizer = build_optimizer(cfg, model, 256)  # global batch 256: lr as configured
    group_of = {id(p): group for group in optimizer.param_groups for p in group["params"]}
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(group_of) == len(list(model.parameters()))
    expected = {}
    for module_name, module in model.named_modules():
        for name, p in module.named_parameters(recurse=False):
            expected[id(p)] = decays(module, name, rule)
            assert group_of[id(p)]["weight_decay"] == (WEIGHT_DECAY if expected[id(p)] else 0.0), (
                f"{module_name}.{name} ({type(module).__name__})"
            )
    assert any(expected.values()) and (rule == "none" or not all(expected.values()))
    assert rule != "norm_and_bias" or not expected[id(model.fc.bias)]
    assert rule != "norm" or expected[id(model.fc.bias)]

    # One step with zero gradients: only the decay term moves a parameter, w -> w - lr * wd * w
    # (momentum's first step is the gradient itself). BN's weights start at 1 and its biases at 0:
    # randomise every parameter so that decay would show on each.
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
            p.grad = torch.zeros_like(p)
    before = {id(p): p.detach().clone() for p in model.parameters()}
    optimizer.step()
    for name, p in model.named_parameters():
        lr = group_of[id(p)]["lr"]
        assert lr == pytest.approx(0.1)
        w = before[id(p)]
        if expected[id(p)]:
            torch.testing.assert_close(p.detach(), w - lr * WEIGHT_DECAY * w, rtol=1e-6, atol=1e-9, msg=name)
            assert not torch.equal(p, w), name
        else:
            assert torch.equal(p, w), name


# --- freeze_bn ---------------------------------------------------------------------------------


def bn_buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    return {
        f"{n}.{b}": getattr(m, b).clone()
        for n, m in model.named_modules()
        if isinstance(m, BatchNorm)
        for b in ("running_mean", "running_var", "num_batches_tracked")
    }


@pytest.mark.parametrize("freeze", [True, False])
def test_freeze_bn_keeps_running_statistics_while_the_convs_train(freeze):
    model = tiny_model()
    before, conv_before = bn_buffers(model), model.layer1[0].conv1.weight.detach().clone()
    stats = one_epoch(model, [tiny_batch(seed=0), tiny_batch(seed=1)], freeze_bn=freeze)
    after = bn_buffers(model)
    assert stats.steps == 2 and before.keys() == after.keys() and len(before) >= 3 * 7  # 7 BNs and more
    assert not torch.equal(conv_before, model.layer1[0].conv1.weight)  # training happened
    assert model.training
    if freeze:
        assert all(not m.training for m in model.modules() if isinstance(m, BatchNorm))
        for key, value in before.items():
            assert torch.equal(value, after[key]), key
    else:  # the contrast: the same epoch with BN training moves every statistic
        for key, value in before.items():
            assert not torch.equal(value, after[key]), key
