"""Hydra entry points: :func:`run_main` around every ``@hydra.main`` (train.py, eval.py and the
commands), and :func:`hydra_command`, the ``main`` of a command that reads a config of ``configs/``
(detect, regrid, export, seed_table).

Hydra composes the config before the decorated function runs, so its own errors (an option that
does not exist, a key that is not in the config, an override it cannot parse) never reach the
function's :func:`resnet.cli.one_line_errors`. Left to itself Hydra prints up to 15 lines and exits
with status 1; :func:`run_main` has it raise them instead and ends each in one line with status 2,
saying what to type.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import hydra
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig

from ..config import config_dir, register_configs
from ..quoting import started_from_checkout, unreadable_override
from .config_exit import exit_config_error
from .errors import JobEnded, one_line_errors

FULL_ERROR = "HYDRA_FULL_ERROR"  # "1": Hydra raises its errors instead of printing them and exiting 1


def run_main(main: Callable[[], object]) -> None:
    """Call a ``@hydra.main`` function; a config Hydra cannot compose ends in one line, status 2
    (:func:`resnet.cli.config_exit.exit_config_error`). With ``HYDRA_FULL_ERROR=1`` set by the user,
    Hydra's own report, traceback included, is left as it is."""
    if os.environ.get(FULL_ERROR) == "1":
        main()
        return
    unknown = unknown_addition(sys.argv[1:], config_groups())
    if unknown is not None:  # Hydra would add it, and the run would go on without what was meant
        exit_config_error(unknown)
    os.environ[FULL_ERROR] = "1"
    try:
        main()
    except (ConfigCompositionException, OverrideParseException) as err:
        exit_config_error(composition_error(err, sys.argv[1:]))
    except JobEnded as err:  # a job of a submitit sweep ended as train.py would have: its one line, status 1
        print(err, file=sys.stderr)
        raise SystemExit(1) from None
    except OSError as err:
        line = unwritable_run_dir(err)
        if line is None:
            raise
        exit_config_error(line)
    finally:
        os.environ.pop(FULL_ERROR, None)


def composition_error(err: Exception, overrides: Sequence[str]) -> str:
    """One line for an error Hydra raised while composing a config from ``overrides``: the
    override as typed, what is wrong, and what to type instead."""
    if isinstance(err, OverrideParseException) and (quoted := unreadable_override(err.override)):
        return (
            f"{err.override}: Hydra cannot read this value as typed (a space, quote, parenthesis, '#', '=', ',' "
            f"or non-ASCII letter needs quotes); type it as {quoted}"
        )
    if isinstance(err, MissingConfigException) and err.options is not None and "/" in err.missing_cfg_file:
        group, _, name = err.missing_cfg_file.rpartition("/")
        typed = _override_of(group, overrides)
        options = sorted(err.options)
        near = difflib.get_close_matches(name, options, n=1)
        prefix = typed.partition("=")[0] if typed else group
        hint = f"did you mean {prefix}={near[0]}? " if near else ""
        return f"{typed or group}: Could not find '{group}/{name}'; {hint}choose one of {', '.join(options)}"
    cause = err.__cause__
    node = getattr(cause, "parent_node", None)
    full_key = getattr(cause, "full_key", None)
    if isinstance(node, DictConfig) and full_key and str(err).startswith("Could not override"):
        typed = _override_of(full_key, overrides) or full_key
        parent, _, key = full_key.rpartition(".")
        keys = sorted(str(k) for k in node if k != "hydra")  # hydra.*: Hydra's settings, not the run's
        near = difflib.get_close_matches(key, keys, n=1)
        where = f"in {parent}" if parent else "in the config"
        value = typed.partition("=")[2]
        hint = f"did you mean {parent + '.' if parent else ''}{near[0]}={value}? " if near else ""
        return f"{typed}: there is no key '{key}' {where}; {hint}its keys: {', '.join(keys)}"
    text = str(err)
    group = re.match(r"Could not override '([\w.]+)'\. No match in the defaults list\.", text)
    suggested = re.search(r"use (\+\S+)", text)
    if group and suggested:  # padding=symmetric: the group is not in the defaults, so it is added with +
        typed = _override_of(group.group(1), overrides) or group.group(1)
        return f"{typed}: {group.group(1)} is not in the config until chosen; did you mean {suggested.group(1)}?"
    lines = [line.strip().rstrip(".") for line in text.splitlines()]
    if "Config search path:" in lines:  # where Hydra looked: not what the user can change
        lines = lines[: lines.index("Config search path:")]
    return "; ".join(line for line in lines if line)


def unwritable_run_dir(err: OSError) -> str | None:
    """One line for Hydra failing to make the run's folder (a read-only mount, a folder Docker made
    as root for ``-v`` and a ``--user`` who cannot write it); None for an error of the command itself."""
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if not f.filename.endswith("hydra_app.py") and
            any(part in f.filename for part in ("/resnet/", "/data/", "train.py", "eval.py"))]  # fmt: skip
    if ours or not err.filename or not any("/hydra/" in f.filename for f in frames):
        return None
    top = Path(str(err.filename)).parts[0] if not Path(str(err.filename)).is_absolute() else str(err.filename)
    return (
        f"cannot write {err.filename} ({err.strerror}), where this run's folder goes: make it writable "
        f"(mkdir -p {top}; a folder Docker made for -v belongs to root: create it before docker run, or "
        "chown it to the --user uid), or pass hydra.run.dir=<a writable folder>"
    )


def config_groups() -> set[str]:
    """The config groups an override may add with ``+`` (``configs/``'s folders, the generated
    ``model`` and ``padding``, Hydra's own)."""
    from hydra.core.config_store import ConfigStore

    register_configs()
    folders = {p.name for p in config_dir().iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    stored = {name for name in ConfigStore.instance().repo if not name.endswith(".yaml")}  # not Hydra's own files
    return folders | stored | {"hydra"}


def unknown_addition(overrides: Sequence[str], groups: set[str]) -> str | None:
    """One line for a ``+`` override outside every config group (``+paddng=asymmetric``): Hydra
    adds it as a new key, which nothing reads, and the run goes on without what was meant. The
    nearest group is named with the override that works."""
    if any(arg.startswith(("--config-dir", "-cd", "hydra.searchpath", "+hydra.searchpath")) for arg in overrides):
        return None  # groups of the user's own config folders: Hydra knows them, this check does not
    for typed in overrides:
        if not typed.startswith("+") or typed.startswith("++") or "=" not in typed:
            continue
        key, _, value = typed[1:].partition("=")
        root = re.split(r"[./]", key.split("@")[0])[0]  # +padding.stem_pool=, +data/base=, +hydra/launcher=
        if root in groups:
            continue
        near = difflib.get_close_matches(root, sorted(groups), n=1)
        hint = f"did you mean +{near[0]}{key[len(root) :]}={value}? " if near else ""
        return (
            f"{typed}: there is no config group '{root}' to add, and a key added with + would be read by "
            f"nothing; {hint}the groups: {', '.join(sorted(g for g in groups if g != 'hydra'))}"
        )
    return None


def _override_of(key: str, overrides: Sequence[str]) -> str | None:
    """The override of ``overrides`` that sets ``key`` (``+key=...``, ``key@pkg=...``), as typed."""
    pattern = re.compile(rf"[+~]*{re.escape(key)}(@[\w.]*)?=")
    return next((o for o in overrides if pattern.match(o)), None)


def hydra_command(
    config_name: str, program: str, run: Callable[[DictConfig], object], training: bool = False
) -> Callable[..., object]:
    """``main(cfg=None)`` for ``configs/<config_name>.yaml`` (:func:`resnet.config.config_dir`):
    Hydra reads the overrides from ``sys.argv`` (or ``cfg``, a composed config, runs as it is); an
    error the user can fix is one line naming ``program`` (``train.py`` when run as that file).
    The config sets ``hydra.job.name`` (Hydra would take this file's). ``training``: the errors and
    stops of a training run (:func:`resnet.cli.one_line_errors`)."""

    def _run(cfg: DictConfig) -> object:
        with one_line_errors(program_name(program), training=training):
            return run(cfg)

    def main(cfg: DictConfig | None = None) -> object:
        """The command: Hydra reads the overrides from ``sys.argv`` (``cfg``: a composed config instead)."""
        with one_line_errors(program_name(program)):  # no configs/ here: one line, not a traceback
            configs = config_dir()
        # version_base 1.3: a run stays in the folder it was started from (hydra.job.chdir defaults
        # to false), so relative paths mean what the user typed; no config needs to say it again.
        _main = hydra.main(config_path=str(configs), config_name=config_name, version_base="1.3")(_run)
        register_configs()  # model=<arch> and padding=<preset>, generated from the tables
        if cfg is not None:
            return _main(cfg)
        run_main(_main)
        return None

    return main


def program_name(installed: str) -> str:
    """How the user started this command, for its messages: ``train.py`` / ``eval.py`` for the
    checkout's script (directly or under torchrun), else the installed name (``resnet-train``,
    ``resnet-regrid``), which ``python -m resnet.cli.<name>`` runs too."""
    started = Path(sys.argv[0]).name if sys.argv else ""
    return started if started in ("train.py", "eval.py") and started_from_checkout() else installed
