"""ONNX export: onnxruntime matches PyTorch by value, and every pad is a constant
that equals what the padding scheme prescribes (docs/padding.md, ResNet-50 at 224)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from resnet import build_model
from resnet.export import export_onnx, static_pads
from resnet.padding import SameConv2d


def _random_bn_stats(model: nn.Module, size: int, seed: int = 0) -> nn.Module:
    """Random BN affine parameters and statistics, returned in eval mode.

    Statistics drawn independently of the weights compound over 50 layers into
    logits in the hundreds, where float32 rounding alone exceeds 1e-4; so they are
    measured on one random batch, then perturbed per channel.
    """
    gen = torch.Generator().manual_seed(seed)
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in norms:
        m.weight.data.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
        m.bias.data.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
        m.momentum = None  # running stats := this batch's stats
    with torch.no_grad():
        model.train()(torch.randn(1, 3, size, size, generator=gen))
    for m in norms:
        m.running_mean.add_(torch.randn(m.num_features, generator=gen) * 0.02 * m.running_var.sqrt())
        m.running_var.mul_(torch.rand(m.num_features, generator=gen) * 0.2 + 0.9)
        m.momentum = 0.1
    return model.eval()


def _run_onnx(path, x: torch.Tensor) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"image": x.numpy()})[0]


def _stride2_pads(proto: onnx.ModelProto) -> list[tuple[str, list[int]]]:
    """(op, [top, left, bottom, right]) of every strided Conv/MaxPool with kernel > 1, in
    graph order, with the pads of a Pad node feeding it added in."""
    nodes = [n for n in proto.graph.node if n.op_type in ("Conv", "MaxPool", "AveragePool", "Pad")]
    padded = list(zip(nodes, static_pads(proto)))  # static_pads lists the same nodes, in order
    pad_nodes = {node.output[0]: pads for node, (op, _, pads) in padded if op == "Pad"}
    found = []
    for node, (op, _, pads) in padded:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if op == "Pad" or max(attrs["strides"]) < 2 or max(attrs["kernel_shape"]) < 2:
            continue
        before = pad_nodes.get(node.input[0], [0] * 8)  # Pad: N, C, H, W begins, then ends
        found.append((op, [pads[0] + before[2], pads[1] + before[3], pads[2] + before[6], pads[3] + before[7]]))
    return found


# A 4-stage ResNet on an input whose side is a multiple of 32 (224, or 64; docs/padding.md): every
# stride-2 site sees an even input (224: stem conv 7/2 on 224, stem pool 3/2 on 112, the 3x3/2 convs
# of layer2-4 on 56, 28, 14), so each pad is the same at both sizes, for ResNet-18 and ResNet-50
# alike. "asymmetric" changes the stem only.
STRIDE2_PADS = {
    "symmetric": [("Conv", [3, 3, 3, 3]), ("MaxPool", [1, 1, 1, 1])] + [("Conv", [1, 1, 1, 1])] * 3,
    "asymmetric": [("Conv", [2, 2, 3, 3]), ("MaxPool", [0, 0, 1, 1])] + [("Conv", [1, 1, 1, 1])] * 3,
}


# ResNet-50 at 64 px with one bottleneck per stage: every stride-2 site of its graph (stem, the
# strided 3x3 and 1x1 shortcut of each stage), at a fraction of the export time of all 16 blocks.
@pytest.mark.parametrize(
    "arch, preset, size, depths", [("resnet50", "asymmetric", 64, (1, 1, 1, 1)), ("resnet18", "symmetric", 224, None)]
)
@pytest.mark.slow
def test_onnx_matches_pytorch_with_every_stride2_pad(tmp_path, arch, preset, size, depths):
    torch.manual_seed(0)
    model = _random_bn_stats(build_model(arch, padding=preset, **({"depths": depths} if depths else {})), size)
    path = export_onnx(model, tmp_path / f"{arch}.onnx", size)
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(x).numpy()
    # float32 through 50 layers with other kernels: 1e-4 of the logits' scale (resnet.export.check_onnx's)
    np.testing.assert_allclose(_run_onnx(path, x), expected, rtol=0, atol=1e-4 * max(1.0, np.abs(expected).max()))

    proto = onnx.load(path)
    assert _stride2_pads(proto) == STRIDE2_PADS[preset]
    props = {p.key: p.value for p in proto.metadata_props}
    assert props["padding"] == preset and props["input_size"] == f"{size}x{size}"
    assert json.loads(props["resnet_meta"])["padding"] == model.meta.padding.as_dict()
    if preset == "asymmetric":  # the exported copy was frozen, not the model
        assert isinstance(model.conv1, SameConv2d)


def test_tf_same_odd_then_even_sizes(tmp_path):
    """resnet_tiny at 27: the stride-2 3x3 convs see 27 (odd), 14 (even), 7 (odd), so
    SAME is (1, 1), then (0, 1), then (1, 1) again. batch_size=2 fixes the batch dimension
    (the default leaves it dynamic: tests/cli/test_cli_tools.py)."""
    torch.manual_seed(0)
    model = _random_bn_stats(build_model("resnet_tiny", num_classes=10, padding="tf_same"), 27)
    path = export_onnx(model, tmp_path / "tiny.onnx", 27, batch_size=2)
    x = torch.randn(2, 3, 27, 27, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(x).numpy()
    np.testing.assert_allclose(_run_onnx(path, x), expected, rtol=0, atol=1e-4)
    proto = onnx.load(path)
    assert _stride2_pads(proto) == [("Conv", [1, 1, 1, 1]), ("Conv", [0, 0, 1, 1]), ("Conv", [1, 1, 1, 1])]
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2


def test_runtime_pads_are_rejected():
    """A graph that derives its pads from a run-time value fails the check."""
    pads = onnx.helper.make_node("Identity", ["pads_in"], ["pads"])
    pad = onnx.helper.make_node("Pad", ["x", "pads"], ["y"], mode="constant")
    graph = onnx.helper.make_graph(
        [pads, pad],
        "dynamic_pad",
        [
            onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 4, 4]),
            onnx.helper.make_tensor_value_info("pads_in", onnx.TensorProto.INT64, [8]),
        ],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    with pytest.raises(ValueError, match="run-time value"):
        static_pads(onnx.helper.make_model(graph))
