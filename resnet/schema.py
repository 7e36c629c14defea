"""Every key of the configs of ``configs/``, declared once (:data:`KEYS`): its type and range,
its default in ``configs/train.yaml``, whether a resume may change it, and the one line the docs say.

The YAML files cannot say that ``epochs`` is a whole number or that ``optim.lr`` is positive, so
``optim.lr=abc`` would end in a traceback, ``optim.lr=-1`` in torch's complaint about the *scaled*
value. :func:`schema_problems` checks every key of :data:`SCHEMA` that a composed config holds, before
any work, quoting the override as typed. A key whose value is a name declares its choices here
(:func:`names`), and the code that acts on it reads them from :func:`choices`. A padding preset and
``data.workers`` are checked in :mod:`resnet.config`.

From :data:`KEYS` come :data:`SCHEMA` (the checks), :data:`resnet.job.resume_rules.RULES` (what a
resume may change) and the resume table of docs/training.md (:func:`resume_table`, written there
by ``python scripts/resume_table.py``); ``tests/cli/test_configs.py`` holds train.yaml's values to
the declared defaults. A new training key: its line in train.yaml (value and comment), its
:class:`Key` here, then ``python scripts/resume_table.py``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from omegaconf import DictConfig, ListConfig, OmegaConf

from data.decode import INTERPOLATIONS
from data.gpu_decode import DECODES


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
    choices: tuple[str, ...] = ()  # a name: the names it may be

    def problem(self, value: object) -> str | None:
        """What is wrong with ``value`` (``expected ...``), or None when it fits."""
        if value is None and self.nullable or isinstance(value, str) and value in self.words:
            return None
        if self.choices:
            named = isinstance(value, str) and value in self.choices
            return None if named else f"expected one of {', '.join(self.choices)}"
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
        if self.kind in (str, bool):
            return isinstance(value, self.kind)
        if isinstance(value, bool):  # true is not a number here, though Python's bool is an int
            return False
        return isinstance(value, int if self.kind is int else (int, float))

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


def names(*taken: str) -> Field:
    """A key whose value is one of ``taken`` (the first: the example its refusal gives)."""
    return Field(str, choices=taken)


FIXED, CHANGES = "fixed", "may change"  # a key's resume rule (resnet.job.resume_rules)
NOT_IN_TRAIN_YAML = object()  # the default of a key train.yaml does not set (a group's, eval.yaml's)


@dataclass(frozen=True)
class Key:
    """Everything about one key, stated once: what it may hold (``field``, checked by
    :func:`schema_problems`; a name's lists the names it takes: :func:`names`), its ``default`` in
    ``configs/train.yaml`` (which a test holds the YAML to), its resume ``rule`` (:data:`FIXED` or
    :data:`CHANGES`; None: its longest prefix's, or no training key) and the one line ``doc`` that
    the resume table of docs/training.md shows."""

    field: Field | None = None
    default: object = NOT_IN_TRAIN_YAML
    rule: str | None = None
    doc: str = ""
    absence_matters: bool = False  # a resume: present or absent is part of what is trained (absent: not set)
    quiet: bool = False  # a resume: differs on every resume by nature; applied, not reported


# Dotted key -> its declaration. A config without the key skips it (each config has a subset). The
# order is the order :func:`schema_problems` reports in, and the docs table's: train.yaml's keys,
# then the groups' (a group's name: the rule of every key under it), then eval.yaml's and the others'.
KEYS: dict[str, Key] = {
    # train.yaml
    "epochs": Key(
        Field(int, low=1, example="epochs=8"),
        8,
        CHANGES,
        "how long: beyond the planned end only where the schedule can extend",
    ),
    "batch_size": Key(
        Field(int, low=1, example="batch_size=128"),
        128,
        FIXED,
        "the batch per process (and, with the world size, the global batch)",
    ),
    "world_size": Key(rule=FIXED, doc="the global batch: batch_size x processes"),  # the launch's, not a key
    "seed": Key(WHOLE, 0, FIXED, "every random draw"),
    "device": Key(names("auto", "cpu", "cuda"), "auto", CHANGES, "where it runs"),
    "amp": Key(names("none", "bf16", "fp16"), "none", FIXED, "the arithmetic of every step"),
    "channels_last": Key(Field(bool, words=("auto",)), True, CHANGES, "how fast"),  # eval.py: auto (on for CUDA)
    "compile": Key(SWITCH, False, CHANGES, "how fast"),
    "sync_bn": Key(SWITCH, False, FIXED, "the batch statistics"),
    "freeze_bn": Key(SWITCH, False, FIXED, "the batch statistics"),
    "deterministic": Key(SWITCH, False, CHANGES, "how reproducible the kernels are"),
    "eval_flip": Key(SWITCH, False, FIXED, "what the val errors measure"),
    "loss": Key(names("ce", "bce"), "ce", FIXED, "the loss"),
    "bce_target_threshold": Key(Field(float, low=0, high=1, nullable=True), None, FIXED, "the loss"),
    "label_smoothing": Key(
        Field(float, low=0, high=1, open_high=True, example="label_smoothing=0.1"), 0.1, FIXED, "the loss"
    ),
    "mixup": Key(Field(float, low=0, example="mixup=0.2"), 0.0, FIXED, "the loss"),  # a Beta alpha; 0: off
    "cutmix": Key(Field(float, low=0, example="cutmix=1.0"), 0.0, FIXED, "the loss"),  # a Beta alpha; 0: off
    "random_erasing": Key(Field(float, low=0, high=1, example="random_erasing=0.25"), 0.0, FIXED, "the augmentation"),
    "ema_decay": Key(  # 0: no EMA
        Field(float, low=0, high=1, open_high=True, example="ema_decay=0.9999"), 0.0, FIXED, "the EMA weights"
    ),
    "ema_every": Key(Field(int, low=1, example="ema_every=32"), 1, FIXED, "the EMA weights"),
    "grad_clip": Key(Field(float, low=0, example="grad_clip=1.0"), 0.0, FIXED, "the update"),
    "on_nonfinite": Key(names("stop", "skip"), "stop", CHANGES, "what a non-finite loss does"),
    "resume": Key(None, False, CHANGES, "where to resume from", quiet=True),
    "data_changed": Key(names("refuse", "rescale"), "refuse", CHANGES, "what a resume on another training set does"),
    "init": Key(None, None, CHANGES, "the weights a fine-tune starts from (read only when there is nothing to resume)"),
    "checkpoint_every": Key(  # optimizer steps between saves; 0: at epoch ends only
        Field(int, low=0, example="checkpoint_every=1000"), 0, CHANGES, "how often last.pt is saved"
    ),
    "dist_timeout": Key(
        Field(float, low=0, open_low=True, example="dist_timeout=600"),
        600,
        CHANGES,
        "how long a collective waits for a stalled process",
    ),
    "checkpoint_minutes": Key(
        Field(float, low=0, example="checkpoint_minutes=10"), 10, CHANGES, "how often last.pt is saved, by the clock"
    ),
    "max_skipped": Key(FRACTION, 0.05, CHANGES, "the share of skipped steps that stops a run"),
    # eval.yaml sets max_unreadable too, to this default: the share that stops an evaluation
    "max_unreadable": Key(FRACTION, 0.05, CHANGES, "the share of unreadable images that stops a run (or eval.py)"),
    "max_unreadable_after": Key(
        Field(int, low=1, example="max_unreadable_after=10000"),
        10_000,
        CHANGES,
        "how many images an epoch reads before max_unreadable is checked as it goes",
    ),
    "stop_after": Key(
        Field(int, low=1, nullable=True, example="stop_after=2"), None, CHANGES, "epochs in this invocation"
    ),
    "eval_every": Key(Field(int, low=1, example="eval_every=1"), 1, CHANGES, "how often the run validates"),
    "log_every": Key(Field(int, low=1, example="log_every=50"), 50, CHANGES, "how often the run logs"),
    "max_steps_per_epoch": Key(
        Field(int, low=1, nullable=True, example="max_steps_per_epoch=20"), None, FIXED, "the schedule's length"
    ),
    "val_images": Key(
        Field(int, low=1, nullable=True, example="val_images=1000"),
        None,
        CHANGES,
        "how many val images a validation scores",
    ),
    "grid": Key(
        Field(list, nullable=True, example="grid=[symmetric,asymmetric]"),
        None,
        FIXED,
        "the presets a grid model trains for",
        absence_matters=True,
    ),
    "grid_bn": Key(
        names("statistics", "affine", "shared"), "statistics", FIXED, "what each BatchNorm keeps per preset"
    ),
    "run_dir": Key(None, "${hydra:runtime.output_dir}", CHANGES, "where the run is written", quiet=True),
    # the groups (their defaults: configs/<group>/<option>.yaml); a key under one has its group's rule
    "padding": Key(rule=FIXED, doc="the padding of every site"),  # compared as built: resnet.job.resume
    "logger": Key(rule=CHANGES, doc="where the run logs"),
    "optim": Key(rule=FIXED, doc="the optimizer and its settings (their state is in the checkpoint)"),
    # (the two list keys before optim.lr, sched: the order schema_problems has always reported in)
    "optim.betas": Key(Field(list, items=float, low=0, high=1, open_high=True, example="optim.betas=[0.9,0.999]")),
    "sched.milestones": Key(Field(list, items=float, low=0, example="sched.milestones=[30,60,80]")),
    "optim.lr": Key(
        Field(float, low=0, open_low=True, example="optim.lr=0.1"),
        rule=CHANGES,
        doc="the LR scale: every LR of the schedule from here on scales with it",
    ),
    "sched": Key(rule=FIXED, doc="the schedule's shape"),
    "optim.momentum": Key(Field(float, low=0, high=1, open_high=True, example="optim.momentum=0.9")),
    "optim.nesterov": Key(SWITCH),
    "optim.weight_decay": Key(Field(float, low=0, example="optim.weight_decay=1e-4")),
    "optim.ref_batch": Key(COUNT),
    "sched.warmup_epochs": Key(Field(float, low=0, example="sched.warmup_epochs=5")),
    "sched.warmup_start_factor": Key(
        Field(float, low=0, high=1, open_low=True, example="sched.warmup_start_factor=0.01")
    ),
    "sched.min_lr_ratio": Key(FRACTION),
    "sched.pct_start": Key(Field(float, low=0, high=1, open_low=True, open_high=True, example="sched.pct_start=0.25")),
    "sched.div_factor": Key(POSITIVE),
    "sched.final_div_factor": Key(POSITIVE),
    "sched.gamma": Key(Field(float, low=0, open_low=True, example="sched.gamma=0.1")),
    "data": Key(rule=FIXED, doc="the data, its image size and augmentation"),
    "data.root": Key(rule=CHANGES, doc="the same data, moved (a node-local copy)"),
    "data.workers": Key(rule=CHANGES, doc="loader processes (a mid-epoch resume also needs the same; it says so)"),
    "data.val_labels": Key(rule=CHANGES, doc="where the val labels are read from"),
    "data.devkit": Key(rule=CHANGES, doc="where the val labels are read from"),
    "data.image_size": Key(COUNT),
    "data.val_size": Key(SIDE),
    "data.num_classes": Key(COUNT),
    "data.in_chans": Key(COUNT),
    "data.crop_pct": Key(Field(float, low=0, high=1, open_low=True, example="data.crop_pct=0.875")),
    "data.min_scale": Key(Field(float, low=0, high=1, open_low=True, example="data.min_scale=0.08")),
    "data.crop_padding": Key(Field(int, low=0, example="data.crop_padding=4")),
    "data.interpolation": Key(names(*INTERPOLATIONS)),  # the choices: data.decode's table of resamplers
    "data.decode": Key(names(*DECODES)),
    "data.augment": Key(SWITCH),
    "data.repeated_aug": Key(STEPS),
    "data.max_file_mb": Key(Field(float, low=0, open_low=True, example="data.max_file_mb=64")),
    "model": Key(rule=FIXED, doc="the architecture and its classes"),
    "model.zero_init_residual": Key(SWITCH),
    # eval.yaml (and detect, regrid, export: the same protocol keys): no training keys, no rule
    "ema": Key(SWITCH),
    "download": Key(SWITCH),
    "crop": Key(SIDE),
    "resize": Key(SIDE),
    "crop_pct": Key(Field(float, low=0, high=1, open_low=True, nullable=True, example="crop_pct=0.875")),
    # regrid.yaml, detect.yaml, export.yaml
    "images": Key(Field(int, low=1, example="images=512")),
    "lr": Key(Field(float, low=0, open_low=True, example="lr=0.01")),
    "features": Key(Field(float, low=0, example="features=3.0")),
    "opset": Key(COUNT),
    "tolerance": Key(Field(float, low=0, high=1, open_low=True, open_high=True, example="tolerance=1e-4")),
    "method": Key(names("bn", "distill")),
}

SCHEMA: dict[str, Field] = {name: key.field for name, key in KEYS.items() if key.field is not None}


def choices(name: str) -> tuple[str, ...]:
    """The names key ``name`` takes (``choices("device")``): the one list its check and its code read."""
    field = KEYS[name].field
    return field.choices if field is not None else ()


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
            example = field.example or (f"{key}={field.choices[0]}" if field.choices else "")
            example = f", e.g. {example}" if example else ""
            problems.append(f"{key}={typed_value(key, value)}: {problem}{example}")
    return problems


def typed_value(key: str, value: object) -> str:
    """``value`` as the user typed it: the override's own text when Hydra ran the command (so that
    ``1e-3`` stays ``1e-3``), else as YAML writes it (true, null)."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        pattern = re.compile(rf"\+*{re.escape(key)}=(.*)")
        for override in reversed(HydraConfig.get().overrides.task):  # the last one given is the one that holds
            found = pattern.fullmatch(override)
            if found:
                return found.group(1)
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return str(value)


# --- the resume table of docs/training.md ------------------------------------------------------

TABLE_HEADER = "| key | rule | what it is |"


def resume_table() -> str:
    """The resume table of docs/training.md, one row per key of :data:`KEYS` with a rule, in its order."""
    rows = [TABLE_HEADER, "|---|---|---|"]
    rows += [f"| `{name}` | {key.rule} | {key.doc} |" for name, key in KEYS.items() if key.rule is not None]
    return "\n".join(rows) + "\n"


def with_resume_table(markdown: str) -> str:
    """``markdown`` (docs/training.md) with its resume table, from :data:`TABLE_HEADER` to the first
    line that is not a table row, replaced by :func:`resume_table`."""
    lines = markdown.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip("\n") == TABLE_HEADER)
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "".join(lines[:start]) + resume_table() + "".join(lines[end:])
