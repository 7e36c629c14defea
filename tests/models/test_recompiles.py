"""torch.compile under grid switching, short batches and progressive resizing: a bounded number of
graphs (docs/gpu.md).

Dynamo caches at most ``torch._dynamo.config.recompile_limit`` graphs (8) per frame and runs the
frame eagerly past it, with one warning. A grid preset is a guard (GridConv2d's pads are Python
ints read when the graph is traced): one graph per preset. A batch shorter than the others (images
skipped as unreadable) and a new training size (progressive resizing) each make dynamo recompile
with that dimension dynamic, once per preset: unmarked, presets x 3 graphs, 9 for 3 presets. The
training loop marks the batch dimension dynamic from the first step, leaving presets x 2.

The graphs are counted by a backend that returns the traced module as it is (no inductor): the
count is dynamo's, the same under any backend, and a test takes seconds on the CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch import nn

import resnet
from data import Normalize
from resnet.engine.loop import StepContext, train_one_epoch
from resnet.grid import draw, make_grid, set_grid
from resnet.runtime.device import Runtime

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

PRESETS = ["symmetric", "asymmetric"]  # asymmetric: SAME stem conv and pool; its block convs are symmetric


class CountingBackend:
    """A ``torch.compile`` backend that counts the graphs dynamo hands it and runs them as traced."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs) -> object:
        self.graphs += 1
        return gm.forward


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def grid_model(presets: list[str]) -> nn.Module:
    torch.manual_seed(0)
    model = resnet.build_model("resnet_tiny", num_classes=3, padding=presets[0])
    return make_grid(model, presets, bn="affine")  # grid_bn=affine: the most state


def batches(sizes: list[int], image_size: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randint(0, 256, (n, 3, image_size, image_size), dtype=torch.uint8, generator=generator),
            torch.randint(0, 3, (n,), generator=generator),
        )
        for n in sizes
    ]


def train_compiled(model: nn.Module, epochs: list[list[tuple[torch.Tensor, torch.Tensor]]]) -> list[int]:
    """``train_one_epoch`` over each list of batches, the model compiled as ``train.py compile=true``
    does (``torch.compile`` of the module the steps call), each step's preset drawn as ``grid=``
    does; returns the graphs compiled so far after each epoch."""
    backend = CountingBackend()
    compiled = torch.compile(model, backend=backend)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    ctx = StepContext(
        runtime=Runtime.local(),
        normalize=Normalize("torch"),
        loss_fn=nn.CrossEntropyLoss(),
        log_every=50,
        on_nonfinite="stop",
        progress=False,
        before_step=lambda step: set_grid(model, draw(0, step, len(model.grid))),
    )
    step, graphs = 0, []
    for epoch, loader in enumerate(epochs):
        step += train_one_epoch(compiled, loader, optimizer, scheduler, ctx, epoch=epoch, global_step=step).steps
        graphs.append(backend.graphs)
    return graphs


def presets_drawn(first: int, steps: int, count: int) -> set[int]:
    return {draw(0, step, count) for step in range(first, first + steps)}


def test_short_batches_add_no_graph_one_graph_per_preset(fresh_dynamo):
    # 12 steps, both presets drawn; batches of 4 with short ones (3, 2: images skipped as unreadable)
    # first and in between. Unmarked, the first batch of another size recompiles with the batch
    # dimension dynamic, once more for each preset compiled before it: 3 graphs, not 2.
    sizes = [3, 4, 4, 2, 4, 4, 3, 4, 4, 4, 2, 4]
    assert presets_drawn(0, len(sizes), 2) == {0, 1}
    assert train_compiled(grid_model(PRESETS), [batches(sizes, 32)]) == [len(PRESETS)]


@pytest.mark.slow  # compiles three graphs: scheduled first
def test_progressive_sizes_add_one_graph_per_preset_and_later_epochs_none(fresh_dynamo):
    # Two training sizes, as data.progressive_resize makes them, then both again: the second size
    # recompiles each preset once with height and width dynamic, and those graphs serve every size
    # after, the first included. Bounded by presets x 2, however many steps and epochs.
    # Past dynamo's limit (8 by default: a grid of 5 presets passes it) the frame would run eagerly
    # for the rest of the run, compiling no more (held at 3 graphs here, the limit lowered to 3):
    # train.py raises the limit to what its grid needs before compiling.
    from resnet.engine.run import allow_recompiles, compiled_graphs

    sizes = [4, 4, 3, 4, 4, 4]
    assert all(presets_drawn(first, len(sizes), 2) == {0, 1} for first in (0, 6))
    epochs = [batches(sizes, image_size, seed) for seed, image_size in enumerate([32, 48, 32, 48])]
    # torch's own patch, restored on exit (pytest's monkeypatch leaves dynamo's config entry hidden)
    with torch._dynamo.config.patch(recompile_limit=3):
        allow_recompiles(compiled_graphs(PRESETS))
        graphs = train_compiled(grid_model(PRESETS), epochs)
    assert graphs == [len(PRESETS), *[2 * len(PRESETS)] * 3]
