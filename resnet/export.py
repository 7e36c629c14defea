"""ONNX export with every pad explicit and static, checked against onnxruntime.

TF 'SAME' layers compute their pad from the input size in ``forward``
(``resnet.padding.SameConv2d``). An exported graph should not: a runtime that reads
it must see the pads themselves, or it may re-derive them under its own convention
(ONNX ``SAME_LOWER`` puts the odd pixel first, TF after; docs/padding.md). So the model
is frozen at one input size first, and the graph is checked afterwards. The batch
dimension stays dynamic (named ``batch``).

The exporter is torch's dynamo-based one: the TorchScript exporter (``dynamo=False``) lowers
each ``F.pad`` into a chain of ops that computes the pads at run time; the dynamo exporter emits
them as constants and folds pads into Conv. The command is ``resnet-export`` (:mod:`resnet.cli.export`).
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from .command_lines import install_extra
from .padding import freeze_padding

if TYPE_CHECKING:
    import onnx

DEFAULT_OPSET = 18  # the dynamo exporter's native opset in torch 2.5-2.14
SHAPE_OPS = ("Shape", "Size")  # their presence means something is computed from the input size
PADDED_OPS = ("Conv", "MaxPool", "AveragePool", "Pad")
CHECK_BATCHES = (1, 3)  # batch sizes the command runs through onnxruntime and PyTorch: the batch is dynamic
CHECK_TOLERANCE = 1e-4  # max |onnxruntime - PyTorch| relative to the largest |logit| (at least 1): float32 noise


# What exporting and checking need beyond the main install: pyproject.toml's extra of that name.
EXPORT_EXTRA = "export"
EXPORT_MODULES = ("onnx", "onnxruntime", "onnxscript")  # the file format, the check's runtime, torch's exporter


def missing_export_tools() -> str | None:
    """One line naming the modules of :data:`EXPORT_MODULES` that do not import here and the
    install that brings them, or None when all import."""
    missing = []
    for name in EXPORT_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if not missing:
        return None
    return f"ONNX export needs {', '.join(missing)}, not installed here: {install_extra(EXPORT_EXTRA)}"


class OnnxMismatch(RuntimeError):
    """onnxruntime's outputs are not PyTorch's; the message is one line saying by how much."""


def export_onnx(
    model: nn.Module,
    path: str | os.PathLike,
    input_size: int | tuple[int, int],
    opset: int = DEFAULT_OPSET,
    batch_size: int | None = None,
    props: dict[str, str] | None = None,
) -> Path:
    """Export ``model`` in eval mode for inputs of ``input_size`` (int or (h, w)).

    ``model`` itself is not changed: a copy is frozen (:func:`freeze_padding`) and
    exported. The model's ``meta`` (arch, padding per site, preprocessing) and the
    input size are written into the ONNX metadata, and ``props`` beside them (where the
    weights came from, say). ``batch_size``: None leaves the batch
    dimension dynamic (named ``batch``), a number fixes it. The file is written to a
    temporary name beside ``path``, then renamed. Raises ``ValueError`` if the graph
    computes a pad at run time.
    """
    import onnx  # the extra's (EXPORT_EXTRA): imported where used, so that the command can say what is missing

    h, w = (input_size, input_size) if isinstance(input_size, int) else input_size
    frozen = freeze_padding(copy.deepcopy(model).eval(), (h, w), explicit=True)
    in_chans = next(m for m in frozen.modules() if isinstance(m, nn.Conv2d)).in_channels
    # torch.export specialises a dimension whose example is 1, so a dynamic batch is traced with 2
    dummy = next(frozen.parameters()).new_zeros(batch_size or 2, in_chans, h, w)  # the weights' dtype and device

    program = torch.onnx.export(
        frozen,
        (dummy,),
        dynamo=True,
        dynamic_shapes=None if batch_size else ({0: torch.export.Dim("batch")},),
        opset_version=opset,
        input_names=["image"],
        output_names=["logits"],
        external_data=False,
        verbose=False,
    )
    proto = program.model_proto
    static_pads(proto)  # raises if a pad is not a constant
    written = {"input_size": f"{h}x{w}"}
    meta = getattr(model, "meta", None)
    if meta is not None:
        written |= {"padding": meta.padding_name, "resnet_meta": json.dumps(meta.as_dict())}
    onnx.helper.set_model_props(proto, written | (props or {}))
    onnx.checker.check_model(proto)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    try:
        onnx.save(proto, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def static_pads(proto: onnx.ModelProto) -> list[tuple[str, str, list[int]]]:
    """``(op_type, node name, pads)`` of every padding node, in graph order.

    Pads are as ONNX lists them: ``[h_begin, w_begin, h_end, w_end]`` for Conv and
    pools, begins then ends over all four axes (N, C, H, W) for Pad. Raises
    ``ValueError`` where a pad is not a graph constant or is left to ``auto_pad``.
    """
    import onnx
    from onnx import numpy_helper

    graph = proto.graph
    constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            value = next((a for a in node.attribute if a.name == "value"), None)
            if value is not None:
                constants[node.output[0]] = numpy_helper.to_array(value.t)

    shape_ops = sorted({node.op_type for node in graph.node if node.op_type in SHAPE_OPS})
    if shape_ops:
        raise ValueError(f"the graph reads the input shape at run time ({', '.join(shape_ops)} ops)")
    found = []
    for node in graph.node:
        if node.op_type not in PADDED_OPS:
            continue
        if node.op_type == "Pad":
            if len(node.input) < 2 or node.input[1] not in constants:
                raise ValueError(f"Pad node {node.name!r} takes its pads from a run-time value, not a constant")
            found.append((node.op_type, node.name, constants[node.input[1]].astype(int).tolist()))
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        auto_pad = attrs.get("auto_pad", b"NOTSET")
        if auto_pad not in (b"NOTSET", b"VALID"):
            raise ValueError(f"{node.op_type} node {node.name!r} leaves its pads to auto_pad={auto_pad.decode()}")
        found.append((node.op_type, node.name, list(attrs.get("pads", [0, 0, 0, 0]))))
    return found


def check_onnx(
    path: str | os.PathLike,
    model: nn.Module,
    batch_sizes: tuple[int, ...] = CHECK_BATCHES,
    tolerance: float = CHECK_TOLERANCE,
    seed: int = 0,
) -> list[tuple[int, float, float]]:
    """Run random images through the ONNX file (onnxruntime, CPU) and through ``model``, a
    batch of each size; ``(batch size, max |logit difference|, allowed)`` per batch.

    Images are random uint8 pixels under the model's preprocessing (``model.meta``), so
    activations have their usual scale. Raises :class:`OnnxMismatch` where a difference
    exceeds ``tolerance`` x max(1, max |logit|), or where the file refuses a batch size.
    """
    import onnxruntime as ort

    from data import Normalize

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (graph_input,) = session.get_inputs()
    _, in_chans, h, w = graph_input.shape
    meta = getattr(model, "meta", None)
    normalize = Normalize(meta.preprocessing if meta is not None else "torch")
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    checks = []
    for n in batch_sizes:
        x = normalize(torch.randint(0, 256, (n, in_chans, h, w), dtype=torch.uint8, generator=generator))
        with torch.no_grad():
            expected = model.eval()(x.to(device)).float().cpu()
        try:
            got = torch.from_numpy(session.run(None, {graph_input.name: x.numpy()})[0])
        except Exception as err:  # onnxruntime's own error types: a shape the graph does not take
            raise OnnxMismatch(f"onnxruntime cannot run a batch of {n}: {str(err).splitlines()[0]}") from None
        if got.shape != expected.shape:
            raise OnnxMismatch(
                f"onnxruntime gives {tuple(got.shape)} logits for a batch of {n}, PyTorch {tuple(expected.shape)}"
            )
        difference = (got - expected).abs().max().item()
        allowed = tolerance * max(1.0, expected.abs().max().item())
        if not difference <= allowed:  # NaN fails too
            raise OnnxMismatch(
                f"onnxruntime's logits differ from PyTorch's by up to {difference:.3g} on a batch of "
                f"{n}; allowed: {allowed:.3g} ({tolerance:g} x max(1, max |logit|))"
            )
        checks.append((n, difference, allowed))
    return checks


def export_checked(
    model: nn.Module,
    path: str | os.PathLike,
    input_size: int | tuple[int, int],
    opset: int = DEFAULT_OPSET,
    tolerance: float = CHECK_TOLERANCE,
    props: dict[str, str] | None = None,
) -> list[tuple[int, float, float]]:
    """:func:`export_onnx` with a dynamic batch (and ``props`` in its metadata), then
    :func:`check_onnx` on batches of :data:`CHECK_BATCHES`; ``path`` appears only once the check
    has passed, and nothing is left behind when it fails. Returns the check's rows."""
    path = Path(path)
    tmp = _temporary(path)
    try:
        export_onnx(model, tmp, input_size, opset, props=props)
        checks = check_onnx(tmp, model, CHECK_BATCHES, tolerance)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return checks


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
