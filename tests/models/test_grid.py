"""Grid-robust models (resnet/grid.py): switching is an attribute, and exact under every preset."""

from __future__ import annotations

import pytest
import torch

from resnet import build_model, with_padding
from resnet.grid import (
    GridBatchNorm2d,
    GridConv2d,
    alternate,
    draw,
    has_grid_bn,
    make_grid,
    preset_state_dict,
    set_grid,
)

PRESETS = ["symmetric", "asymmetric", "tf_same", "tf_slim", "caffe"]


@pytest.mark.parametrize("arch", ["resnet18", "resnet50_v2"])
def test_under_each_preset_the_outputs_are_those_of_a_model_built_under_it(arch):
    torch.manual_seed(0)
    model = make_grid(build_model(arch, num_classes=7, padding=PRESETS[0]).eval(), PRESETS)
    params = {name: id(p) for name, p in model.named_parameters()}
    modules = {name: id(m) for name, m in model.named_modules()}
    for size in (64, 57):  # even: SAME is asymmetric; odd: it is symmetric
        x = torch.randn(2, 3, size, size)
        for preset in reversed(PRESETS):
            set_grid(model, preset)
            reference = with_padding(model, preset)  # a plain model under that preset, the same tensors
            assert type(reference.conv1) is not GridConv2d
            with torch.no_grad():
                assert torch.equal(model(x), reference.eval()(x)), (preset, size)
    assert {name: id(p) for name, p in model.named_parameters()} == params  # nothing rebuilt or copied
    assert {name: id(m) for name, m in model.named_modules()} == modules


def test_the_state_dict_keys_are_the_plain_models():
    plain = build_model("resnet18", padding="symmetric")
    grid = make_grid(build_model("resnet18", padding="symmetric"), ["symmetric", "tf_same"])
    assert grid.state_dict().keys() == plain.state_dict().keys()
    assert grid.grid == ("symmetric", "tf_same")


def test_the_draw_is_seeded_per_step_and_uses_every_preset():
    draws = [draw(3, step, 3) for step in range(300)]
    assert draws == [draw(3, step, 3) for step in range(300)]  # a function of (seed, step): resumes agree
    assert draws != [draw(4, step, 3) for step in range(300)]
    assert set(draws) == {0, 1, 2} and min(map(draws.count, range(3))) > 70  # uniform: ~100 each


@pytest.mark.parametrize(
    "presets, message",
    [
        (["symmetric"], "needs two or more different presets"),
        (["symmetric", "symmetric"], "needs two or more different presets"),
        (["symmetric", "keras"], "mixes stem pool pad values"),
        (["asymmetric", "symmetric"], "the model is built under symmetric; build it under asymmetric"),
        (["symmetric", "sideways"], "unknown padding preset 'sideways'"),
    ],
)
def test_bad_grids_are_one_line(presets, message):
    with pytest.raises(ValueError, match=message):
        make_grid(build_model("resnet_tiny", padding="symmetric"), presets)


# --- train.py grid=[...] -------------------------------------------------------------------------


def test_a_grid_run_switches_per_step_records_its_presets_and_resumes_exactly(tiny_folder, tmp_path, monkeypatch):
    import resnet.engine.run as engine_run
    from resnet.checkpoint import load_checkpoint, load_model
    from tests.helpers.faults import assert_same_training
    from tests.helpers.training import run_in_process

    drawn, applied = [], []

    def recorded_draw(seed: int, step: int, count: int) -> int:
        drawn.append((seed, step, draw(seed, step, count)))
        return drawn[-1][2]

    monkeypatch.setattr(engine_run, "draw", recorded_draw)
    monkeypatch.setattr(engine_run, "set_grid", lambda model, preset: applied.append(preset) or set_grid(model, preset))
    grid = ("grid=[symmetric,tf_same]", "epochs=2", "seed=5", "data.image_size=32")
    results = run_in_process(tiny_folder, tmp_path / "straight", *grid)
    assert results["grid"] == ["symmetric", "tf_same"] and results["padding_name"] == "symmetric"
    assert [(seed, step) for seed, step, _ in drawn] == [(5, step) for step in range(12)]  # 6 steps an epoch
    assert {preset for *_, preset in drawn} == {0, 1}  # both presets trained
    presets = [preset for *_, preset in drawn]  # each step ran under its draw, each validation under preset 0
    assert applied == presets[:6] + [0] + presets[6:] + [0]
    saved = load_checkpoint(tmp_path / "straight" / "last.pt")
    assert saved["grid"] == ["symmetric", "tf_same"] and saved["meta"]["padding_name"] == "symmetric"
    model = load_model(tmp_path / "straight" / "last.pt")  # a plain model under the first preset
    assert model.meta.padding_name == "symmetric" and not any(isinstance(m, GridConv2d) for m in model.modules())
    assert with_padding(model, "tf_same").meta.padding_name == "tf_same"  # eval.py +padding=tf_same

    run_in_process(tiny_folder, tmp_path / "resumed", *grid, "stop_after=1")
    run_in_process(tiny_folder, tmp_path / "resumed", *grid, "resume=true")
    assert_same_training(saved, load_checkpoint(tmp_path / "resumed" / "last.pt"))


def test_grid_and_padding_together_are_one_line(tiny_folder, tmp_path):
    from resnet.config import ConfigError
    from tests.helpers.training import run_in_process

    with pytest.raises(ConfigError, match="grid= and \\+padding= both choose the padding: drop \\+padding"):
        run_in_process(tiny_folder, tmp_path, "grid=[symmetric,asymmetric]", "+padding=symmetric")
    with pytest.raises(ConfigError, match="needs two or more different presets"):
        run_in_process(tiny_folder, tmp_path, "grid=[symmetric]")


def test_a_grid_run_keeps_norms_per_preset_and_eval_reads_the_chosen_presets(tiny_folder, tmp_path):
    from resnet.checkpoint import load_checkpoint
    from resnet.evaluation.protocol import padded_as_configured
    from resnet.weights import load_weights, parse_weights
    from tests.helpers.compose import compose_config
    from tests.helpers.training import run_in_process

    presets = ["symmetric", "tf_same"]
    run_in_process(tiny_folder, tmp_path, f"grid=[{','.join(presets)}]", "epochs=1", "seed=3", "grid_bn=affine")
    saved = load_checkpoint(tmp_path / "last.pt")
    assert has_grid_bn(saved["model"]) and "bn1.grid_weight_offset" in saved["model"]
    trained = make_grid(build_model("resnet_tiny", num_classes=3, padding=presets[0]), presets, bn="affine")
    trained.load_state_dict(saved["model"])
    trained.eval()
    loaded = load_weights(parse_weights(str(tmp_path / "last.pt")), None, download=False)
    first = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    x = torch.randn(2, 3, 32, 32)
    outputs = []
    for index, preset in enumerate(presets):  # eval.py weights=<run>/last.pt +padding=<preset>
        model = padded_as_configured(compose_config("eval", f"+padding={preset}"), loaded.model, loaded.preset_norms)
        set_grid(trained, index)
        with torch.no_grad():
            outputs.append(model(x))
            assert torch.equal(outputs[-1], trained(x)), preset
    first_norms = with_padding(loaded.model, presets[1])  # the second preset's pads, the first's norms
    with torch.no_grad():
        assert not torch.equal(first_norms(x), outputs[1])  # the norms matter, so the test can fail
    assert all(torch.equal(v, loaded.model.state_dict()[k]) for k, v in first.items())  # the loaded model kept its own


def test_eval_of_a_grid_runs_ema_reads_the_ema_entries_of_each_preset(tiny_folder, tmp_path):
    from resnet.checkpoint import load_checkpoint
    from resnet.weights import load_weights, parse_weights
    from tests.helpers.training import run_in_process

    run_in_process(tiny_folder, tmp_path, "grid=[symmetric,tf_same]", "epochs=1", "ema_decay=0.5")
    saved = load_checkpoint(tmp_path / "last.pt")
    spec = parse_weights(str(tmp_path / "last.pt"))
    ema, plain = load_weights(spec, None, download=False, ema=True), load_weights(spec, None, download=False)
    key = "bn1.running_mean"
    assert torch.equal(ema.preset_norms["tf_same"][key], saved["ema"]["bn1.grid_running_mean"][0])
    assert torch.equal(plain.preset_norms["tf_same"][key], saved["model"]["bn1.grid_running_mean"][0])
    assert not torch.equal(ema.preset_norms["tf_same"][key], plain.preset_norms["tf_same"][key])


def test_export_of_a_grid_run_under_its_second_preset_carries_that_presets_statistics(tiny_folder, tmp_path):
    import numpy as np
    import onnxruntime as ort

    from resnet.checkpoint import load_checkpoint
    from resnet.cli.export import run as export
    from tests.helpers.compose import compose_config
    from tests.helpers.training import run_in_process

    presets = ["symmetric", "tf_same"]
    run_in_process(tiny_folder, tmp_path, f"grid=[{','.join(presets)}]", "epochs=1")
    trained = make_grid(build_model("resnet_tiny", num_classes=3, padding=presets[0]), presets, bn="statistics")
    trained.load_state_dict(load_checkpoint(tmp_path / "last.pt")["model"])
    set_grid(trained.eval(), 1)
    out = export(
        compose_config(
            "export", f"weights={tmp_path / 'last.pt'}", f"out={tmp_path / 'm.onnx'}", "+padding=tf_same", "crop=32"
        )
    )
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    onnx_logits = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"image": x.numpy()})[0]
    first_stats = build_model("resnet_tiny", num_classes=3, padding="tf_same").eval()  # the first preset's
    first_stats.load_state_dict(preset_state_dict(trained.state_dict(), 0))
    with torch.no_grad():
        np.testing.assert_allclose(onnx_logits, trained(x).numpy(), rtol=0, atol=1e-4)
        assert np.abs(onnx_logits - first_stats(x).numpy()).max() > 1e-3  # the statistics matter: the test can fail


def test_shared_statistics_and_sync_bn_with_a_grid(tiny_folder, tmp_path):
    from resnet.checkpoint import load_checkpoint
    from resnet.config import ConfigError
    from tests.helpers.training import run_in_process

    with pytest.raises(ConfigError, match="grid_bn=statistics keeps .* pass grid_bn=shared or sync_bn=false"):
        run_in_process(tiny_folder, tmp_path / "sync", "grid=[symmetric,asymmetric]", "sync_bn=true")
    for given in ("true", "false"):
        with pytest.raises(ConfigError, match=f"^grid_bn={given}: expected one of statistics, affine, shared, e"):
            run_in_process(tiny_folder, tmp_path / "bad", "grid=[symmetric,asymmetric]", f"grid_bn={given}")
    run_in_process(tiny_folder, tmp_path / "shared", "grid=[symmetric,tf_same]", "grid_bn=shared", "epochs=1")
    assert not has_grid_bn(load_checkpoint(tmp_path / "shared" / "last.pt")["model"])
    run_in_process(tiny_folder, tmp_path / "stats", "grid=[symmetric,tf_same]", "epochs=1")  # the default
    state = load_checkpoint(tmp_path / "stats" / "last.pt")["model"]
    assert has_grid_bn(state) and not any(key.endswith(("grid_weight_offset", "grid_bias_offset")) for key in state)


def test_a_grid_run_resumes_only_with_its_own_presets_and_batchnorm(tiny_folder, tmp_path):
    from resnet.config import ConfigError
    from tests.helpers.training import run_in_process

    run_in_process(tiny_folder, tmp_path, "grid=[symmetric,tf_same]", "stop_after=1")
    with pytest.raises(
        ConfigError,
        match=r"was trained with grid=\[symmetric,tf_same\], this run has "
        r"\[symmetric,asymmetric\]: pass grid=\[symmetric,tf_same\] to resume it",
    ):
        run_in_process(tiny_folder, tmp_path, "grid=[symmetric,asymmetric]", "resume=true")
    with pytest.raises(ConfigError, match="grid_bn=statistics, this run has shared: pass grid_bn=statistics"):
        run_in_process(tiny_folder, tmp_path, "grid=[symmetric,tf_same]", "grid_bn=shared", "resume=true")
    with pytest.raises(ConfigError, match="was trained with grid=\\[symmetric,tf_same\\], this run has null"):
        run_in_process(tiny_folder, tmp_path, "resume=true")


@pytest.mark.parametrize("bn", ["statistics", "affine", "shared"])
def test_a_checkpoint_says_its_grid_and_what_its_batchnorms_keep_from_its_weights(tmp_path, bn):
    # resnet.checkpoint.recorded_grid: what eval, resume and regrid read of a grid checkpoint, the
    # BatchNorm layout from the weights it holds (not from a config key that older files lack)
    from resnet.checkpoint import load_checkpoint, recorded_grid, save_checkpoint

    presets = ["symmetric", "asymmetric"]
    model = make_grid(build_model("resnet_tiny", num_classes=3, padding=presets[0]), presets, bn=bn)
    save_checkpoint(tmp_path / "grid.pt", model, grid=presets)
    save_checkpoint(tmp_path / "plain.pt", build_model("resnet_tiny", num_classes=3, padding="symmetric"))
    assert recorded_grid(load_checkpoint(tmp_path / "grid.pt")) == (presets, bn)
    assert recorded_grid(load_checkpoint(tmp_path / "plain.pt")) == ([], "shared")


def test_regridding_a_grid_model_to_one_of_its_presets_points_to_eval(tiny_folder, tmp_path):
    from resnet.cli.regrid import run
    from resnet.config import ConfigError
    from tests.helpers.compose import compose_config
    from tests.helpers.training import run_in_process

    run_in_process(tiny_folder, tmp_path, "grid=[symmetric,tf_same]", "epochs=1")
    cfg = compose_config(
        "regrid",
        f"weights={tmp_path / 'last.pt'}",
        "+padding=tf_same",
        f"out={tmp_path / 'r.pt'}",
        "data=imagefolder",
        f"data.root={tiny_folder}",
        "data.num_classes=3",
    )
    with pytest.raises(
        ConfigError,
        match=r"was trained for tf_same \(grid\[symmetric,tf_same\]\): python eval.py "
        r"weights=.* \+padding=tf_same runs it with its own BatchNorm",
    ):
        run(cfg)
    assert not (tmp_path / "r.pt").exists()


def test_detection_scores_each_preset_of_a_grid_model_with_its_own_batchnorm():
    from data import Normalize
    from resnet.detect import detect_padding
    from resnet.evaluation.loop import evaluate
    from resnet.grid import preset_norms, use_preset_norms
    from resnet.runtime.device import Runtime

    state = _per_grid_model(("symmetric", "asymmetric")).state_dict()
    norms = preset_norms(state, ["symmetric", "asymmetric"])
    plain = build_model("resnet_small", num_classes=10, in_chans=1, padding="symmetric").eval()
    plain.load_state_dict(preset_state_dict(state, 0))
    generator = torch.Generator().manual_seed(0)
    batches = [
        (
            torch.randint(0, 256, (16, 1, 28, 28), dtype=torch.uint8, generator=generator),
            torch.randint(0, 10, (16,), generator=generator),
        )
    ]
    normalize = Normalize("torch")
    report = detect_padding(plain, batches, normalize, 28, preset_norms=norms)
    asymmetric = next(s for s in report.scores if "asymmetric" in s.presets)
    run = {"runtime": Runtime.local(), "normalize": normalize, "progress": False}
    own = evaluate(use_preset_norms(with_padding(plain, "asymmetric"), norms), batches, **run)
    first = evaluate(with_padding(plain, "asymmetric"), batches, **run)  # the first preset's BatchNorm
    assert asymmetric.loss == own.loss != first.loss


def _per_grid_model(presets=("symmetric", "asymmetric", "tf_same"), affine: bool = False):
    torch.manual_seed(0)
    model = make_grid(
        build_model("resnet_small", num_classes=10, in_chans=1, padding=presets[0]),
        list(presets),
        bn="affine" if affine else "statistics",
    )
    model.train()
    with torch.no_grad():
        for index in range(len(presets)):  # each preset's statistics measured on different data
            set_grid(model, index)
            for _ in range(index + 1):
                model(torch.randn(16, 1, 28, 28) * (index + 1) + index)
    return model.eval()


def test_per_grid_bn_under_each_preset_equals_a_plain_model_holding_that_presets_statistics():
    model = _per_grid_model()
    x = torch.randn(4, 1, 28, 28)
    outputs = []
    for index, preset in enumerate(model.grid):
        set_grid(model, index)
        plain = build_model("resnet_small", num_classes=10, in_chans=1, padding=preset).eval()
        plain.load_state_dict(preset_state_dict(model.state_dict(), index))  # strict: the plain keys exactly
        with torch.no_grad():
            got = model(x)
            assert torch.equal(got, plain(x)), preset
        outputs.append(got)
    assert not torch.equal(outputs[0], outputs[2])  # the statistics differ between presets


def test_per_grid_affine_switches_exactly_and_every_parameter_is_in_every_step():
    from resnet.engine.optim import undecayed

    model = _per_grid_model(affine=True)
    norms = [m for m in model.modules() if isinstance(m, GridBatchNorm2d)]
    with torch.no_grad():  # each preset's affine its own
        for bn in norms:
            bn.grid_weight_offset.normal_()
            bn.grid_bias_offset.normal_()
    x = torch.randn(4, 1, 28, 28)
    for index, preset in enumerate(model.grid):
        set_grid(model, index)
        plain = build_model("resnet_small", num_classes=10, in_chans=1, padding=preset).eval()
        plain.load_state_dict(preset_state_dict(model.state_dict(), index))
        with torch.no_grad():
            assert torch.equal(model(x), plain(x)), preset
    set_grid(model, 1)
    model.train()(x).sum().backward()  # under preset 1: the shared part and preset 1's offset learn
    assert all(p.grad is not None for p in model.parameters())  # DDP would find none unused
    for bn in norms:
        assert bn.weight.grad.abs().sum() > 0 and torch.equal(bn.grid_weight_offset.grad[0], bn.weight.grad)
        assert torch.equal(bn.grid_bias_offset.grad[0], bn.bias.grad)
        assert bn.grid_weight_offset.grad[1].abs().sum() == 0  # preset 2's offset: in the graph, gradient zero
    assert {bn.grid_weight_offset for bn in norms} <= undecayed(model, "norm_and_bias")  # norm weights: no decay
    norms[0].reset_parameters()  # every preset's affine back to (1, 0): offsets zero
    assert norms[0].grid_weight_offset.eq(0).all() and norms[0].grid_bias_offset.eq(0).all()
    assert norms[0].weight.eq(1).all()
    with pytest.raises(ValueError, match="unknown grid BatchNorm 'both'; choose one of statistics, affine, shared"):
        make_grid(build_model("resnet_tiny", padding="symmetric"), ["symmetric", "asymmetric"], bn="both")


def test_per_grid_bn_training_updates_only_the_active_presets_statistics():
    model = _per_grid_model()
    norms = [m for m in model.modules() if isinstance(m, GridBatchNorm2d)]
    assert len(norms) == sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules()) > 0
    before = {k: v.clone() for k, v in model.state_dict().items()}
    counts = [norms[0].statistics(i)[2].item() for i in range(3)]
    assert counts == [1, 2, 3]  # each preset counted its own batches
    set_grid(model, 1)
    with torch.no_grad():
        model.train()(torch.randn(8, 1, 28, 28))
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.rpartition(".")[2].startswith("grid_") for k in changed)  # presets 1.. live there
    for bn in norms:
        for index in (0, 2):
            assert torch.equal(bn.statistics(index)[0], _before(model, bn, index, before))
        assert not torch.equal(bn.statistics(1)[0], _before(model, bn, 1, before))
    # re-estimation resets the active preset's statistics only
    bn = norms[0]
    bn.reset_running_stats()
    assert bn.statistics(1)[2].item() == 0 and bn.statistics(0)[2].item() == 1 and bn.statistics(2)[2].item() == 3


def _before(model, bn, index, state):
    """``bn``'s running mean of preset ``index`` in the state dict ``state``."""
    name = next(n for n, m in model.named_modules() if m is bn)
    return state[f"{name}.running_mean"] if index == 0 else state[f"{name}.grid_running_mean"][index - 1]


def test_per_grid_bn_state_dict_keeps_the_plain_keys_and_adds_grid_ones():
    model = _per_grid_model(("symmetric", "asymmetric"))
    plain = build_model("resnet_small", num_classes=10, in_chans=1, padding="symmetric")
    state = model.state_dict()
    assert has_grid_bn(state) and not has_grid_bn(plain.state_dict())
    assert set(plain.state_dict()) < set(state)
    assert {k.rpartition(".")[2] for k in set(state) - set(plain.state_dict())} == {
        "grid_running_mean",
        "grid_running_var",
        "grid_num_batches_tracked",
    }
    assert preset_state_dict(state, 0).keys() == plain.state_dict().keys()
    assert torch.equal(preset_state_dict(state, 0)["bn1.running_mean"], state["bn1.running_mean"])
    assert torch.equal(preset_state_dict(state, 1)["bn1.running_mean"], state["bn1.grid_running_mean"][0])
    # a model made anew with per-grid BN loads it back (the trained run's checkpoint)
    again = make_grid(
        build_model("resnet_small", num_classes=10, in_chans=1, padding="symmetric"),
        ["symmetric", "asymmetric"],
        bn="statistics",
    )
    again.load_state_dict(state)


def test_alternate_gives_each_preset_its_turn():
    assert [alternate(0, step, 3) for step in range(6)] == [0, 1, 2, 0, 1, 2]
    assert [alternate(1, step, 2) for step in range(4)] == [1, 0, 1, 0]


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: GridBatchNorm2d(4, 2, track_running_stats=False), "need a BatchNorm that tracks running statistics"),
        (lambda: GridBatchNorm2d(4, 2, affine=False, affine_per_preset=True), "need a BatchNorm with affine weights"),
        (lambda: GridConv2d(2, 2, (3, 1), stride=2, schemes=["same", "symmetric"]), "a grid conv is square"),
    ],
)
def test_a_grid_layer_built_by_hand_that_cannot_switch_exactly_is_refused_in_one_line(build, message):
    with pytest.raises(ValueError, match=message):
        build()
