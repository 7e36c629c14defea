"""Run configuration shared by the commands: what they read from a config and the checks that run
before any work (a value that cannot work is one :class:`ConfigError` line, and exit status 2), the
generated ``model=<arch>`` and ``padding=<preset>`` options, and the configs composed as the commands
see them (:func:`compose`; :func:`data_config`, a dataset's :class:`data.DataConfig` outside Hydra).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from data.config import ConfigError as ConfigError  # re-exported: the library raises it from here
from data.registry import find, in_memory

from .archs import ARCHS, canonical_name
from .padding import BLUR_SITES, PRESETS, SCHEME_SITES, UnknownScheme, resolve_padding
from .runtime.cpus import affinity_cpus
from .runtime.workers import auto_workers, data_workers
from .schema import schema_problems

# amp=: autocast dtype (resnet.runtime.device), one per name of schema.choices("amp") (tests/cli/test_configs.py)
AMP_DTYPES = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def padding_from_config(cfg: DictConfig) -> dict | None:
    """``+padding=<preset>`` / ``+padding.<site>=<scheme>`` add a ``padding`` node (sites it
    leaves null keep the preset's scheme); without one, the model's or weights' own padding
    applies. The value goes to :func:`resnet.padding.resolve_padding`."""
    node = cfg.get("padding")
    return None if node is None else OmegaConf.to_container(node, resolve=True)


def config_device(name: str) -> torch.device:
    """``device=`` for one process (:func:`resnet.runtime.distributed.pick_device`); cuda without a GPU
    is a :class:`ConfigError`."""
    from .runtime.distributed import LaunchError, pick_device

    try:
        return pick_device(name)
    except LaunchError as err:
        raise ConfigError(str(err)) from None


def padding_overrides(name: str) -> list[str]:
    """Hydra overrides that select the scheme ``name`` names (:attr:`resnet.padding.Padding.name`):
    its preset, each site where it departs from it, each blurred site. ``symmetric`` gives
    ``["+padding=symmetric"]``; ``tf_same[stem_pool=symmetric]+blur(block_conv)`` gives
    ``["+padding=tf_same", "+padding.stem_pool=symmetric", "+padding.block_conv_blur=true"]``."""
    padding = resolve_padding(name)  # an unknown name fails here, in one line
    preset, changed = padding.departures()
    return [
        f"+padding={preset}",
        *(f"+padding.{site}={scheme}" for site, scheme in changed.items()),
        *(f"+padding.{site}=true" for site in BLUR_SITES if getattr(padding, site)),
    ]


def scheme_words(name: str) -> str:
    """A scheme's name as a line names it: a preset alone; a per-site scheme with the overrides
    that select it, so that a reader can run it again: ``tf_same[stem_pool=symmetric] (+padding=tf_same
    +padding.stem_pool=symmetric)``."""
    if name in PRESETS:
        return name
    return f"{name} ({' '.join(padding_overrides(name))})"


def check_run_config(cfg: DictConfig) -> None:
    """Every key :data:`resnet.schema.SCHEMA` declares (:func:`check_schema`), then the keys the
    commands share: the architecture, the padding, the data."""
    check_schema(cfg)  # first: the checks below compare values that must be numbers
    try:
        if cfg.get("model") is not None:
            canonical_name(cfg.model.arch)  # model.arch=<typo> fails here, listing the names
        resolve_padding(padding_from_config(cfg))  # unknown preset / site / scheme fails here, before any work
    except UnknownScheme as err:
        raise ConfigError(f"{err} (e.g. {_site_override(cfg, err.site, err.choices[0])})") from None
    except (ValueError, TypeError) as err:
        raise ConfigError(str(err)) from None
    check_data_package()  # before check_data_config imports from it
    check_data_config(cfg.data)


def check_schema(cfg: DictConfig) -> None:
    """The first key of ``cfg`` that does not fit its declaration (:func:`resnet.schema.schema_problems`),
    as one :class:`ConfigError` line: ``batch_size=-4: expected a whole number >= 1, e.g. batch_size=128``."""
    problems = schema_problems(cfg)
    if problems:
        raise ConfigError(problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))


def check_data_config(data_cfg: DictConfig) -> None:
    """The data keys every run needs: a root directory for image folders, a worker count torch accepts."""
    workers = data_cfg.workers
    if str(workers) != "auto":
        cores = affinity_cpus()  # torch's count: its warning and this check agree
        if not isinstance(workers, int) or not 0 <= workers <= cores:
            raise ConfigError(
                f"data.workers={workers} is out of range: 0 (load in the main process) to the {cores} CPU cores "
                f"this process may use (torch warns above that); or data.workers=auto ({auto_workers()} here)"
            )
    memory = in_memory(data_cfg.name)
    if memory is not None:  # generated or built in: a root only where one is given (null: its own lookup)
        if data_cfg.get("root") is not None:
            try:
                memory.check_root(data_cfg.root)
            except FileNotFoundError as err:
                raise ConfigError(str(err)) from None
        return
    if OmegaConf.is_missing(data_cfg, "root"):
        raise ConfigError(f"data={data_cfg.name} needs data.root=/path/to/{data_cfg.name}")
    root = data_cfg.root
    if root is None or not Path(root).is_dir():
        from data.testsets import LAYOUTS  # imported late: check_data_package runs first

        what = "a file" if root is not None and Path(root).exists() else "not a directory"
        entry = find(data_cfg.name)
        contents = LAYOUTS.get(data_cfg.name) or (entry.required_contents("train", "val") if entry else "its images")
        raise ConfigError(f"data.root={root} is {what}; {data_cfg.name} needs a directory holding {contents}")


def _site_override(cfg: DictConfig, site: str, scheme: str) -> str:
    """The override that sets one site as the command line stands: ``padding.<site>=`` where a
    ``+padding=<preset>`` made the node (its scheme sites exist), ``+padding.<site>=`` where it
    did not; a blur site, which a preset leaves out and a recipe may set, ``++padding.<site>=``
    (Hydra's add-or-override)."""
    if site in BLUR_SITES:
        return f"++padding.{site}={scheme}"
    node = cfg.get("padding")
    chosen = node is not None and "preset" in node
    return f"{'' if chosen else '+'}padding.{site}={scheme}"


def check_data_package() -> None:
    """The top-level ``data`` package must be this project's, not one that shadows it (a
    ``data/`` package in the working directory, or another distribution's)."""
    ours = Path(__file__).resolve().parent.parent / "data"  # installed beside resnet/, editable or not
    spec = importlib.util.find_spec("data")
    found = Path(spec.origin).resolve().parent if spec is not None and spec.origin else None
    if found != ours:
        raise ConfigError(
            f"the 'data' package imported here is {found or 'a namespace package'}, not this project's {ours}; "
            "run from another directory (or rename that package)"
        )


def register_configs() -> None:
    """Add the generated options to Hydra's ConfigStore (idempotent; call before composing).

    * ``model=<arch>`` for every architecture of :data:`resnet.archs.ARCHS`: the one model
      config, ``configs/model/resnet.yaml``, with that ``arch``;
    * the ``launch_time`` resolver (:func:`resnet.runtime.distributed.launch_time`), in the run dir's name;
    * the ``dataset`` resolver (:func:`dataset_fact`): an in-memory dataset's YAML reads its
      classes, channels and size from its registry entry, where they are stated once;
    * ``padding=<preset>`` for every preset of :data:`resnet.padding.PRESETS`: the preset's
      name, and a null override slot per scheme site (``padding.stem_pool=same`` fills one).
      The blur sites get no slot, so that a recipe's ``padding.block_conv_blur: true`` survives
      a ``+padding=<preset>`` given after it (a null slot would overwrite it); they are set
      with ``+padding.block_conv_blur=true``.
    """
    from hydra.core.config_store import ConfigStore

    from .runtime.distributed import launch_time

    # ${launch_time:%H-%M-%S}: train.yaml's run dir, the same in every process of a torchrun launch
    OmegaConf.register_new_resolver("launch_time", lambda pattern: launch_time().strftime(pattern), replace=True)
    OmegaConf.register_new_resolver("dataset", dataset_fact, replace=True)  # ${dataset:num_classes}
    store = ConfigStore.instance()
    have = store.repo.get("model", {}), store.repo.get("padding", {})
    if all(f"{arch}.yaml" in have[0] for arch in ARCHS) and all(f"{p}.yaml" in have[1] for p in PRESETS):
        return  # stored already: storing again would rebuild every node on every compose
    for arch in ARCHS:
        store.store(group="model", name=arch, node={"defaults": ["resnet", "_self_"], "arch": arch})
    for preset in PRESETS:
        store.store(group="padding", name=preset, node={"preset": preset, **dict.fromkeys(SCHEME_SITES)})


DATASET_FACTS = ("num_classes", "in_chans", "image_size")  # what ${dataset:<fact>} reads of an in-memory entry


def dataset_fact(fact: str, *, _parent_: DictConfig) -> int:
    """``${dataset:<fact>}`` in a ``data:`` node: that fact of the in-memory dataset its ``name``
    names (:class:`data.registry.InMemory`), so that ``configs/data/<name>.yaml`` does not repeat
    its module. An override (``data.num_classes=3``) replaces the interpolation as any value."""
    name = _parent_.get("name")
    entry = in_memory(str(name))
    if entry is None or fact not in DATASET_FACTS:
        raise ConfigError(
            f"${{dataset:{fact}}} reads {', '.join(DATASET_FACTS)} of an in-memory dataset of "
            f"data/ (data.name), not {fact} of {name}; write the value in the YAML instead"
        )
    return getattr(entry, fact)


CONFIGS_ENV = "RESNET_PADDING_CONFIGS"  # a configs/ folder to use instead of the checkout's


def config_dir() -> Path:
    """The project's ``configs/``: ``$RESNET_PADDING_CONFIGS`` if set, else the installed package's
    (``resnet/configs``, which a wheel and ``pip install .`` carry), else the checkout's top-level
    ``configs/``, the one source of both."""
    package = Path(__file__).resolve().parent
    chosen = os.environ.get(CONFIGS_ENV)
    places = [Path(chosen)] if chosen else [package / "configs", package.parent / "configs"]
    for place in places:
        if (place / "train.yaml").is_file():
            return place.resolve()
    raise ConfigError(f"no configs/ with train.yaml in {' or '.join(str(p.resolve()) for p in places)}; "
                      f"reinstall resnet-padding or set {CONFIGS_ENV}=/path/to/checkout/configs")  # fmt: skip


def compose(name: str, *overrides: str, hydra: bool = False) -> DictConfig:
    """``configs/<name>.yaml`` with ``overrides``, the generated options included, as the command
    of that name composes it; ``hydra``: keep the ``hydra`` node. Inside a running Hydra app, from
    that app's config path."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    if GlobalHydra.instance().is_initialized():
        return hydra_compose(config_name=name, overrides=list(overrides), return_hydra_config=hydra)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return hydra_compose(config_name=name, overrides=list(overrides), return_hydra_config=hydra)


def data_config(name: str, **changes):
    """The :class:`data.DataConfig` of ``python train.py data=<name> data.<key>=<value> ...``, made
    outside Hydra: ``configs/data/<name>.yaml`` with ``changes`` over it (``root=``, ``image_size=``),
    ``workers=auto`` as :func:`resnet.runtime.workers.auto_workers` counts it here. The library's way to a
    DataConfig: ``build_loaders(data_config("imagefolder", root="/data/pets"), batch_size=64)``."""
    from data.config import DataConfig

    node = {**_composed_data(name), **changes}
    return DataConfig.from_config({**node, "workers": data_workers(node["workers"])})


@functools.cache
def _composed_data(name: str) -> dict:
    """``configs/data/<name>.yaml`` composed, resolved where it can be (a ``???`` stays as it is)."""
    return OmegaConf.to_container(compose("train", f"data={name}").data, resolve=True, throw_on_missing=False)
