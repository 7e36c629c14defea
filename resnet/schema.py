"""The type and range of every number and switch a config of ``configs/`` holds.

The YAML files give each key a default and a comment; they cannot say that ``epochs`` is a whole
number or that ``optim.lr`` is positive, so an override such as ``optim.lr=abc`` would reach the
optimizer and end in a traceback, and ``optim.lr=-1`` in torch's complaint about the *scaled*
value. :func:`schema_problems` checks every key of :data:`SCHEMA` that a composed config holds, before
any work (:func:`resnet.config.check_run_config` raises the first as a one-line
:class:`resnet.config.ConfigError`), quoting the override as typed.

Keys whose values are names (``device``, ``amp``, ``loss``, a padding preset, ``data.workers``) are
checked where their choices are defined (:mod:`resnet.config`, :mod:`resnet.engine.checks`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from omegaconf import DictConfig, ListConfig, OmegaConf


@dataclass(frozen=True)
class Field:
    """What one key may hold: a ``kind`` (int: a whole number; float: any number; bool: true or
    false), an optional range, null where the key has a "not set" meaning, and the words that
    the key takes besides (``channels_last: auto``)."""

    kind: type  # int, float, bool, or list (its items' kind: items)
    low: float | None = None  # smallest value allowed (of each item, for a list)
    high: float | None = None  # largest value allowed
    open_low: bool = False  # low itself is not allowed
    open_high: bool = False  # high itself is not allowed
    nullable: bool = False  # null means "not set" (the comment in the YAML says what then)
    words: tuple[str, ...] = ()  # strings allowed besides the kind's values
    example: str = ""  # a value that works, for the message
    items: type | None = None  # a list's items: int, float or str

    def problem(self, value: object) -> str | None:
        """What is wrong with ``value`` (``expected ...``), or None when it fits."""
        if value is None and self.nullable or isinstance(value, str) and value in self.words:
            return None
        if self.kind is list:
            if not isinstance(value, (list, ListConfig)):
                return f"expected {self._describe()}"
            item = Field(self.items or str, self.low, self.high, self.open_low, self.open_high)
            return next((f"{problem} for each item" for v in value if (problem := item.problem(v))), None)
        if not self._is_kind(value) or self.kind in (int, float) and not math.isfinite(value):
            return f"expected {self._describe()}"
        if self.low is not None and (value < self.low or self.open_low and value == self.low):
            return f"expected {self._describe()}"
        if self.high is not None and (value > self.high or self.open_high and value == self.high):
            return f"expected {self._describe()}"
        return None

    def _is_kind(self, value: object) -> bool:
        if self.kind is str:
            return isinstance(value, str)
        if self.kind is bool:
            return isinstance(value, bool)
        if isinstance(value, bool):  # true is not a number here, though Python's bool is an int
            return False
        return isinstance(value, int) if self.kind is int else isinstance(value, (int, float))

    def _describe(self) -> str:
        kinds = {bool: "true or false", int: "a whole number", float: "a number", str: "a name"}
        if self.kind is list:
            return f"a list of {kinds[self.items or str].partition(' ')[2]}s" + (" (or null)" if self.nullable else "")
        what = kinds[self.kind]
        if self.low is not None and self.high is not None:
            what += f" in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}{')' if self.open_high else ']'}"
        elif self.low is not None:
            what += f" {'>' if self.open_low else '>='} {self.low:g}"
        extras = [*self.words, *(["null"] if self.nullable else [])]
        if extras:
            what += f" (or {' or '.join(extras)})"
        return what


WHOLE = Field(int)
COUNT = Field(int, low=1)  # one or more
STEPS = Field(int, low=0)  # zero (off) or more
SWITCH = Field(bool)
FRACTION = Field(float, low=0, high=1)
POSITIVE = Field(float, low=0, open_low=True)
SIDE = Field(int, low=1, nullable=True)  # a side in pixels; null: the weights' or dataset's own

# Dotted key -> what it may hold; a config without the key skips it (each config has a subset).
SCHEMA: dict[str, Field] = {
    # train.yaml
    "epochs": Field(int, low=1, example="epochs=8"),
    "batch_size": Field(int),  # its range: resnet.config.check_run_config
    "seed": WHOLE,
    "channels_last": Field(bool, words=("auto",)),  # eval.py: auto (on for CUDA)
    "compile": SWITCH, "sync_bn": SWITCH, "freeze_bn": SWITCH, "deterministic": SWITCH, "eval_flip": SWITCH,
    "bce_target_threshold": Field(float, low=0, high=1, nullable=True),
    "label_smoothing": Field(float), "mixup": Field(float), "cutmix": Field(float),  # ranges: engine/checks.py
    "random_erasing": Field(float), "ema_decay": Field(float), "ema_every": Field(int),
    "grad_clip": Field(float, low=0, example="grad_clip=1.0"),
    "checkpoint_every": Field(int),
    "dist_timeout": Field(float, low=0, open_low=True, example="dist_timeout=600"),
    "checkpoint_minutes": Field(float, low=0, example="checkpoint_minutes=10"),
    "max_skipped": FRACTION,
    "max_unreadable": FRACTION,
    "stop_after": Field(int, low=1, nullable=True, example="stop_after=2"),
    "eval_every": Field(int, low=1, example="eval_every=1"),
    "log_every": Field(int, low=1, example="log_every=50"),
    "max_steps_per_epoch": Field(int, low=1, nullable=True, example="max_steps_per_epoch=20"),
    "val_images": Field(int, low=1, nullable=True, example="val_images=1000"),
    "grid": Field(list, nullable=True, example="grid=[symmetric,asymmetric]"),
    "optim.betas": Field(list, items=float, low=0, high=1, open_high=True, example="optim.betas=[0.9,0.999]"),
    "sched.milestones": Field(list, items=float, low=0, example="sched.milestones=[30,60,80]"),
    "optim.lr": Field(float, low=0, open_low=True, example="optim.lr=0.1"),
    "optim.momentum": Field(float, low=0, high=1, open_high=True, example="optim.momentum=0.9"),
    "optim.nesterov": SWITCH,
    "optim.weight_decay": Field(float, low=0, example="optim.weight_decay=1e-4"),
    "optim.ref_batch": COUNT,
    "sched.warmup_epochs": Field(float, low=0, example="sched.warmup_epochs=5"),
    "sched.warmup_start_factor": Field(float, low=0, high=1, open_low=True, example="sched.warmup_start_factor=0.01"),
    "sched.min_lr_ratio": FRACTION,
    "sched.pct_start": Field(float, low=0, high=1, open_low=True, open_high=True, example="sched.pct_start=0.25"),
    "sched.div_factor": POSITIVE, "sched.final_div_factor": POSITIVE,
    "sched.gamma": Field(float, low=0, open_low=True, example="sched.gamma=0.1"),
    "data.image_size": COUNT, "data.val_size": SIDE, "data.num_classes": COUNT, "data.in_chans": COUNT,
    "data.crop_pct": Field(float, low=0, high=1, open_low=True, example="data.crop_pct=0.875"),
    "data.augment": SWITCH, "data.repeated_aug": STEPS,
    "model.zero_init_residual": SWITCH,
    # eval.yaml (and detect, regrid, export: the same protocol keys)
    "ema": SWITCH, "download": SWITCH,
    "crop": SIDE, "resize": SIDE,
    "crop_pct": Field(float, low=0, high=1, open_low=True, nullable=True, example="crop_pct=0.875"),
    # regrid.yaml, detect.yaml, export.yaml
    "images": Field(int, low=1, example="images=512"),
    "lr": Field(float, low=0, open_low=True, example="lr=0.01"),
    "features": Field(float, low=0, example="features=3.0"),
    "opset": COUNT,
}  # fmt: skip


def schema_problems(cfg: DictConfig) -> list[str]:
    """One line per key of :data:`SCHEMA` whose value in ``cfg`` does not fit: ``key=value: expected ...``."""
    absent = object()
    problems = []
    for key, field in SCHEMA.items():
        value = OmegaConf.select(cfg, key, default=absent, throw_on_missing=False)
        if value is absent:  # not in this config, or ??? (its own check says what to pass)
            continue
        problem = field.problem(value)
        if problem is not None:
            example = f", e.g. {field.example}" if field.example else ""
            problems.append(f"{key}={typed_value(key, value)}: {problem}{example}")
    return problems


def typed_value(key: str, value: object) -> str:
    """``value`` as the user typed it: the override's own text when Hydra ran the command (so that
    ``1e-3`` stays ``1e-3``), else as YAML writes it (true, null)."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        pattern = re.compile(rf"\+*{re.escape(key)}=(.*)")
        for override in HydraConfig.get().overrides.task:
            found = pattern.fullmatch(override)
            if found:
                return found.group(1)
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return str(value)
