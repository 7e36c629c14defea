"""What every weights source shares: its errors, its result, files on disk, and the import
of a state dict into a model built on the meta device.

Nothing here touches the network unless ``download=True``: a published file that is not in
its hub's cache raises :class:`WeightsUnavailable` with one line saying where the file goes
and how to fetch it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import torch

from ..archs import ALIASES
from ..checkpoint import CheckpointError, read_torch_file
from ..checkpoint.errors import describe, error_line
from ..checkpoint.load import shapes
from ..model import ResNet, build_model
from ..padding import init_blur_filters


class WeightsError(ValueError):
    """A weights= value that cannot be used; the message is one line saying what to do."""


class WeightsUnavailable(WeightsError):
    """The weights are not on disk (and download was not asked for, or failed)."""


class StateDictMismatch(ValueError):
    """A state dict that does not fit ``arch``: ``problems`` (the keys and shapes that differ)
    and ``fits``, the architecture it does fit (or None). The message is the library call to
    make; :func:`convert_file` turns it into the ``model=`` to pass for a file."""

    def __init__(self, message: str, arch: str, problems: str, fits: str | None):
        super().__init__(message)
        self.arch, self.problems, self.fits = arch, problems, fits


@dataclass(frozen=True)
class OriginProtocol:
    """How the weights' publisher (or the training run) evaluates them; None where it says nothing."""

    crop: int | None = None
    resize: int | None = None
    crop_pct: float | None = None
    interpolation: str | None = None
    preprocessing: str | None = None


@dataclass(frozen=True)
class WeightsSpec:
    """A parsed ``weights=`` value: published weights by ``name``, or a file at ``path``."""

    source: str  # checkpoint | torchvision | timm | keras | fbtorch | tensornets
    name: str | None = None  # ResNet50_Weights.IMAGENET1K_V1, resnet50.a1_in1k, ResNet50V2
    path: Path | None = None
    text: str = ""  # the value as given

    @property
    def published(self) -> bool:
        return self.name is not None


@dataclass(frozen=True)
class LoadedWeights:
    model: ResNet  # eval mode, on the CPU, under the weights' native padding
    origin: OriginProtocol  # how the weights' publisher (or the training run) evaluates them
    trained_for: str | None = None  # what they were trained under when not the meta's preset (grid[a,b])
    # per-grid BN (train.py grid=[...]): each preset's BatchNorm entries, by preset name; the model
    # holds the first's (resnet.grid.use_preset_norms puts another's in)
    preset_norms: Mapping[str, Mapping[str, torch.Tensor]] = field(default_factory=dict)


def fetch(url: str, download: bool, what: str, file: Path | None = None) -> Path:
    """``file`` (None: where ``torch.hub.load_state_dict_from_url`` caches ``url``) if it is there; else
    download ``url`` to it when allowed, else say how."""
    file = file or Path(torch.hub.get_dir()) / "checkpoints" / Path(urlparse(url).path).name
    if file.is_file():
        return file
    if not download:
        raise WeightsUnavailable(
            f"{what} not found at {file}; pass download=true to fetch {url}, or put that file there"
        )
    file.parent.mkdir(parents=True, exist_ok=True)
    hash_prefix = re.search(r"-([a-f0-9]{6,})\.", file.name)  # torch.hub's convention: name-<sha256 prefix>.pth
    try:
        torch.hub.download_url_to_file(url, str(file), hash_prefix=hash_prefix[1] if hash_prefix else None)
    except (OSError, RuntimeError) as err:  # URLError is an OSError; a hash mismatch a RuntimeError
        raise WeightsUnavailable(
            f"could not download {what} from {url} ({first_line(err)}); fetch it elsewhere and put it at {file}"
        ) from None
    return file


def load_state_dict_file(path: str | Path) -> dict[str, torch.Tensor]:
    """A state dict from ``.safetensors`` or a torch file, loaded without running pickled code.

    A file that cannot be read (cut short, not a torch or safetensors file, pickled code)
    raises :class:`resnet.checkpoint.CheckpointError`, one line naming it."""
    path = Path(path)
    if not path.is_file():
        raise WeightsUnavailable(f"no weights file at {path}")
    if path.suffix == ".safetensors":  # safetensors runs no code
        from safetensors.torch import load_file

        try:
            return load_file(path)
        except Exception as err:  # SafetensorError (cut short, a bad header) is a bare Exception subclass
            raise CheckpointError(
                f"{path} is not a readable safetensors file ({error_line(err)}): it is cut short or damaged; "
                "copy it again, or save the state dict with safetensors.torch.save_file"
            ) from None
    state = read_torch_file(path)
    if isinstance(state, dict) and "meta" in state and "model" in state:
        raise WeightsError(f"{path} is one of our checkpoints; pass it as weights={path} (no source prefix)")
    if not (isinstance(state, dict) and all(isinstance(v, torch.Tensor) for v in state.values())):
        raise WeightsError(
            f"{path} holds {describe(state)}, not a state dict (a dict of tensors); pass the file of a "
            "model.state_dict()"
        )
    return state


def convert_file(path: Path, convert: Callable[..., ResNet], *args: object, **kwargs: object) -> ResNet:
    """``convert(*args, **kwargs)`` for weights read from ``path``; weights of another
    architecture than the one asked for become one line naming the file and the ``model=``
    that fits (where the message of ``convert`` names the library call to make)."""
    try:
        return convert(*args, **kwargs)
    except StateDictMismatch as err:
        fix = "pass model=<the architecture that wrote it>"
        if err.fits:
            fix = f"pass model={err.fits}, or leave model= out to tell the architecture from the file"
        raise CheckpointError(f"{path} does not fit {err.arch} ({err.problems}); {fix}") from None


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def pick_arch(arch: str, valid: tuple[str, ...], caller: str, source_names: Iterable[str] = ()) -> str:
    """``arch`` (ours, or an alias) if the source can import it; else a line listing what it can."""
    name = ALIASES.get(arch, arch)
    if name not in valid:
        names = tuple(source_names)
        also = f" (or the source's names: {', '.join(names)})" if names else ""
        raise ValueError(f"{caller} cannot import {arch!r}; choose one of {', '.join(valid)}{also}")
    return name


def arch_by_shapes(state_dict: Mapping[str, torch.Tensor], candidates: Iterable[str]) -> str | None:
    """The first of ``candidates`` whose state dict has exactly these keys and shapes, or None.

    The one place an architecture is told from tensors alone (bare files, error hints).
    """
    if "fc.weight" not in state_dict:
        return None
    got = shapes(state_dict)
    for name in candidates:
        with torch.device("meta"):  # shapes only: nothing is allocated or initialised
            model = build_model(name, state_dict["fc.weight"].shape[0])
        if shapes(model) == got:
            return name
    return None


def few(what: str, items, limit: int = 4) -> str:
    """'3 missing key(s) (a, b, c)': a few names, so the message stays readable."""
    items = sorted(items)
    if not items:
        return ""
    more = f", ... {len(items) - limit} more" if len(items) > limit else ""
    return f"{len(items)} {what}(s) ({', '.join(items[:limit])}{more})"


def join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def check_shapes(
    want: Mapping[str, tuple[int, ...]],
    state_dict: Mapping[str, torch.Tensor],
    name: str,
    caller: str,
    candidates: tuple[str, ...],
) -> None:
    """Fail with the keys that differ, and the candidate arch the state dict fits, if any."""
    got = shapes(state_dict)
    if dict(want) == got:
        return
    wrong = sorted(k for k in want.keys() & got.keys() if want[k] != got[k])
    problems = join(
        few("missing key", want.keys() - got.keys()),
        few("unexpected key", got.keys() - want.keys()),
        few("shape mismatch", [f"{k} {got[k]}, want {want[k]}" for k in wrong]),
    )
    guess = arch_by_shapes(state_dict, [c for c in candidates if c != name])
    hint = f" It is a {guess} state dict: call {caller}(state_dict, {guess!r})." if guess else ""
    raise StateDictMismatch(f"the state dict does not fit {name}: {problems}.{hint}", name, problems, guess)


def import_state_dict(
    name: str,
    state_dict: Mapping[str, torch.Tensor],
    candidates: tuple[str, ...],
    caller: str,
    source: str,
    **build: object,
) -> ResNet:
    """A torch-layout state dict (torchvision's names) -> ``name``, eval mode, under the
    source's native padding. ``build``: more :func:`resnet.build_model` arguments."""
    if "fc.weight" not in state_dict:
        raise ValueError(f"the state dict has no classifier (fc.weight) to read num_classes from; {caller} needs one")
    with torch.device("meta"):
        model = build_model(name, state_dict["fc.weight"].shape[0], source=source, **build)
    check_shapes(shapes(model), state_dict, name, caller, candidates)
    # A copy, so the imported model never shares storage with the caller's tensors.
    return assign(model, {k: v.detach().clone() for k, v in state_dict.items()})


def assign(model: ResNet, state_dict: Mapping[str, torch.Tensor]) -> ResNet:
    """Assign ``state_dict`` (cast to the model's dtypes) to the meta-built ``model``; init what is left."""
    targets = model.state_dict()
    converted = {k: v.to(targets[k].dtype) for k, v in state_dict.items()}
    model.load_state_dict(converted, strict=False, assign=True)
    for module in model.modules():  # only a head left out by from_keras(num_classes=...)
        if any(t.is_meta for t in module.parameters(recurse=False)):
            module.to_empty(device="cpu", recurse=False)
            module.reset_parameters()
    init_blur_filters(model)  # a blurred site's filter is no state-dict entry
    return model.eval()
