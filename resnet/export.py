"""ONNX export with every pad explicit and static.

TF 'SAME' layers compute their pad from the input size in ``forward``
(``resnet.padding.SameConv2d``). An exported graph should not: a runtime that reads
it must see the pads themselves, or it may re-derive them under its own convention
(ONNX ``SAME_LOWER`` puts the odd pixel first, TF after; docs/padding.md). So the model
is frozen at one input size first, and the graph is checked afterwards.

The exporter is torch's dynamo-based one. The TorchScript exporter (``dynamo=False``)
still works offline in torch 2.14, but lowers each ``F.pad`` into a
ConstantOfShape/Concat/Reshape/Slice/Transpose/Cast chain that computes the pads at
run time; the dynamo exporter emits them as constants and folds pads into Conv.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import onnx
import torch
from onnx import numpy_helper
from torch import nn

from .padding import freeze_padding

DEFAULT_OPSET = 18  # the dynamo exporter's native opset in torch 2.5-2.14
SHAPE_OPS = ("Shape", "Size")  # their presence means something is computed from the input size
PADDED_OPS = ("Conv", "MaxPool", "AveragePool", "Pad")


def export_onnx(
    model: nn.Module,
    path: str | os.PathLike,
    input_size: int | tuple[int, int],
    opset: int = DEFAULT_OPSET,
    batch_size: int = 1,
) -> Path:
    """Export ``model`` in eval mode for inputs of ``input_size`` (int or (h, w)).

    ``model`` itself is not changed: a copy is frozen (:func:`freeze_padding`) and
    exported. The model's ``meta`` (arch, padding per site, preprocessing) and the
    input size are written into the ONNX metadata. Raises ``ValueError`` if the
    graph computes a pad at run time.
    """
    h, w = (input_size, input_size) if isinstance(input_size, int) else input_size
    frozen = freeze_padding(copy.deepcopy(model).eval(), (h, w), explicit=True)
    first_param = next(frozen.parameters())
    in_chans = next(m for m in frozen.modules() if isinstance(m, nn.Conv2d)).in_channels
    dummy = torch.zeros(batch_size, in_chans, h, w, dtype=first_param.dtype, device=first_param.device)

    program = torch.onnx.export(
        frozen,
        (dummy,),
        dynamo=True,
        opset_version=opset,
        input_names=["image"],
        output_names=["logits"],
        external_data=False,
        verbose=False,
    )
    proto = program.model_proto
    static_pads(proto)  # raises if a pad is not a constant
    props = {"input_size": f"{h}x{w}"}
    meta = getattr(model, "meta", None)
    if meta is not None:
        props |= {"padding": meta.padding_name, "resnet_meta": json.dumps(meta.as_dict())}
    onnx.helper.set_model_props(proto, props)
    onnx.checker.check_model(proto)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(proto, path)
    return path


def static_pads(proto: onnx.ModelProto) -> list[tuple[str, str, list[int]]]:
    """``(op_type, node name, pads)`` of every padding node, in graph order.

    Pads are as ONNX lists them: ``[h_begin, w_begin, h_end, w_end]`` for Conv and
    pools, begins then ends over all four axes (N, C, H, W) for Pad. Raises
    ``ValueError`` where a pad is not a graph constant or is left to ``auto_pad``.
    """
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
