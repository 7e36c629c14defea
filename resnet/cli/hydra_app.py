"""Hydra entry points: :func:`run_main` around every ``@hydra.main`` (train.py, eval.py and the
commands), and :func:`hydra_command`, the ``main`` of a command that reads a config of ``configs/``.

Hydra composes the config before the decorated function runs, so its own errors (an option that does not
exist, a key that is not in the config, an override it cannot parse) never reach the function's
:func:`resnet.cli.one_line_errors`; left to itself Hydra prints up to 15 lines and exits with status 1.
:func:`run_main` has it raise them and ends each in one line with status 2, saying what to type; the typos
Hydra would accept or answer in its config files' syntax, :func:`checked_overrides` ends before it reads them.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import hydra
from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf

from ..command_lines import started_from_checkout, unreadable_override
from ..config import ConfigError, compose, config_dir, padding_overrides, register_configs
from ..padding import SCHEME_NAME
from .errors import JobEnded, exit_config_error, one_line_errors

FULL_ERROR = "HYDRA_FULL_ERROR"  # "1": Hydra raises its errors instead of printing them and exiting 1
# Options that point Hydra at the user's own configs: their groups and keys are not the ones checked here
OWN_CONFIGS = ("--config-dir", "-cd", "--config-name", "-cn", "--config-path", "-cp", "hydra.searchpath",
               "+hydra.searchpath", "++hydra.searchpath")  # fmt: skip
PRESET_NAME = re.compile(r"[\w-]+")  # a preset, or a typo of one: Hydra reads it (and names the nearest)
RootConfig = Callable[[], DictConfig | None]  # the command's config, composed when first asked


def run_main(main: Callable[[], object], config_name: str) -> None:
    """Call a ``@hydra.main`` function of ``configs/<config_name>.yaml`` on the command line's
    overrides as :func:`checked_overrides` leaves them; a config Hydra cannot compose ends in one
    line, status 2 (:func:`resnet.cli.errors.exit_config_error`). With ``HYDRA_FULL_ERROR=1``
    set by the user, Hydra's own report, traceback included, is left as it is."""
    try:
        sys.argv[1:] = checked_overrides(sys.argv[1:], config_name)
    except ConfigError as err:
        exit_config_error(str(err))
    if os.environ.get(FULL_ERROR) == "1":
        main()
        return
    os.environ[FULL_ERROR] = "1"
    try:
        main()
    except (ConfigCompositionException, OverrideParseException) as err:
        exit_config_error(composition_error(err, sys.argv[1:]))
    except JobEnded as err:  # a job of a submitit sweep ended as train.py would have: its one line, status 1
        print(err, file=sys.stderr)
        raise SystemExit(1) from None
    except (OSError, ValueError) as err:  # ValueError: logging's "Unable to configure handler 'file'"
        line = unwritable_run_dir(err, config_name)
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
        prefix, _, value = typed.partition("=") if typed else (group, "", name)
        if not re.fullmatch(r"[\w\-,]+", value):  # choice(...), glob(...): the one name Hydra could not find
            value = name
        mended = [option if option in options else _nearest(option, options) for option in value.split(",")]
        found = all(mended) and mended != value.split(",")  # a sweep's hint keeps its other values
        hint = f"did you mean {prefix}={','.join(mended)}? " if found else ""
        return f"{typed or group}: Could not find '{group}/{name}'; {hint}choose one of {', '.join(options)}"
    cause = err.__cause__
    node = getattr(cause, "parent_node", None)
    full_key = getattr(cause, "full_key", None)
    if isinstance(node, DictConfig) and full_key and str(err).startswith("Could not override"):
        typed = _override_of(full_key, overrides) or full_key
        parent, _, key = full_key.rpartition(".")
        if not parent and key in config_groups():  # padding.stem_pool=same: the group is added with +
            return f"{typed}: {key} is not in the config until chosen; did you mean +{typed.lstrip('+~')}?"
        keys = sorted(str(k) for k in node if k != "hydra")  # hydra.*: Hydra's settings, not the run's
        value = typed.partition("=")[2]
        within = f"{parent}." if parent else ""
        near = _nested_keys(node, key) or difflib.get_close_matches(key, keys, n=1)  # lr=: optim.lr, epoch=: epochs
        where = f"in {parent}" if parent else "in the config"
        hint = f"did you mean {' or '.join(f'{within}{k}={value}' for k in near)}? " if near else ""
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


def _nearest(name: str, options: Sequence[str]) -> str | None:
    """The option ``name`` was meant to be: the same but for case (``SYMMETRIC``), else the closest."""
    by_case = {option.lower(): option for option in options}
    near = difflib.get_close_matches(name.lower(), list(by_case), n=1)
    return by_case[near[0]] if near else None


def _nested_keys(node: DictConfig, key: str) -> list[str]:
    """The dotted paths below ``node`` that end in ``key`` (``lr`` -> ``optim.lr``), Hydra's settings left out."""
    from ..job.resume_rules import flatten

    leaves = flatten(OmegaConf.to_container(node, resolve=False))
    return sorted(path for path in leaves if path.endswith(f".{key}") and not path.startswith("hydra."))


def _override_of(key: str, overrides: Sequence[str]) -> str | None:
    """The override of ``overrides`` that sets ``key`` (``+key=...``, ``key@pkg=...``), as typed;
    else one that sets a key below it (``padding.stem_pool=...`` for ``padding``)."""
    for below in ("", r"\.[\w.]+"):
        pattern = re.compile(rf"[+~]*{re.escape(key)}{below}(@[\w.]*)?=")
        typed = next((o for o in overrides if pattern.match(o)), None)
        if typed is not None:
            return typed
    return None


def unwritable_run_dir(err: Exception, app: str) -> str | None:
    """One line for Hydra failing to write the run's folder before the command runs: making it (a
    read-only mount, a folder Docker made as root for ``-v`` and a ``--user`` who cannot write it),
    or, in a folder that exists (a run resumed or re-run on a read-only mount), opening its log or
    saving its config record (:func:`read_only_run_dir`). None for an error of the command itself."""
    cause = err if isinstance(err, OSError) else err.__cause__  # logging raises ValueError from the OSError
    if not isinstance(cause, OSError) or not cause.filename:
        return None
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if not f.filename.endswith("hydra_app.py") and
            any(part in f.filename for part in ("/resnet/", "/data/", "train.py", "eval.py"))]  # fmt: skip
    if ours or not any("/hydra/" in f.filename for f in frames):
        return None
    written = Path(str(cause.filename))
    folder = written.parent.parent if written.parent.name == ".hydra" else written.parent
    if folder.is_dir() and not any(f.name == "mkdir" for f in frames):  # the run's folder is there already
        return read_only_run_dir(folder, cause, app)
    top = written.parts[0] if not written.is_absolute() else str(written)
    return (
        f"cannot write {cause.filename} ({cause.strerror}), where this run's folder goes: make it writable "
        f"(mkdir -p {top}; a folder Docker made for -v belongs to root: create it before docker run, or "
        "chown it to the --user uid), or pass hydra.run.dir=<a writable folder>"
    )


def read_only_run_dir(folder: Path, err: OSError, app: str) -> str:
    """One line for a run folder of ``app`` (``train``, ``eval``, ...) that exists but cannot be
    written: what it holds (a finished run, a run to resume) and what to type instead."""
    from ..command_lines import app_words, command, override
    from ..job.ending import finished_results

    cannot = f"{folder} cannot be written ({err.strerror})"
    if app != "train" or not (folder / "last.pt").is_file():  # eval.py's record, a run that saved nothing yet
        return f"{cannot}: pass hydra.run.dir=<a writable folder>, where this run keeps its log and config record"
    copy = f"cp -r {folder} <a writable folder> and run again with hydra.run.dir=<that folder> resume=true"
    done = finished_results(folder, 1)
    if done is None:
        return f"{cannot}, so its run cannot go on there: to resume it, {copy}"
    top1 = done.get("top1_err")
    shown = f", top-1 err {top1:.2f}%" if isinstance(top1, (int, float)) else ""
    epochs = f"{done['epochs']} epoch{'s' if done['epochs'] != 1 else ''}"
    evaluate = command([*app_words("eval"), override("weights", folder / "last.pt")])
    return (
        f"{cannot}; it holds a finished run ({epochs}{shown}): evaluate it with {evaluate}; to train it further, {copy}"
    )


def config_groups() -> set[str]:
    """The config groups an override may add with ``+`` (``configs/``'s folders, the generated
    ``model`` and ``padding``, Hydra's own)."""
    from hydra.core.config_store import ConfigStore

    register_configs()
    folders = {p.name for p in config_dir().iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    stored = {name for name in ConfigStore.instance().repo if not name.endswith(".yaml")}  # not Hydra's own files
    return folders | stored | {"hydra"}


def checked_overrides(overrides: Sequence[str], config_name: str) -> list[str]:
    """The command line's ``overrides`` as Hydra is to read them for ``configs/<config_name>.yaml``:
    a scheme name typed as ``+padding=<name>`` (or ``++padding=``) becomes the overrides that select
    it (:func:`resnet.config.padding_overrides`). A :class:`ConfigError` of one line for a typo that
    Hydra would take (a key added with ``+`` or ``++`` that nothing reads) or answer in its config
    files' syntax (a group chosen twice, ``++`` on a group)."""
    if not any(arg.startswith(OWN_CONFIGS) for arg in overrides):
        groups = config_groups()
        config = functools.cache(lambda: _root_config(config_name))  # composed only for a ++ that needs it
        for check in (repeated_group, unknown_addition, forced_group):
            line = check(overrides, groups, config)
            if line is not None:
                raise ConfigError(line)
    return [expanded for typed in overrides for expanded in _scheme_overrides(typed)]


def _root_config(config_name: str) -> DictConfig | None:
    """``configs/<config_name>.yaml`` as composed without overrides, Hydra's node included; None
    where it cannot be (Hydra then says why, composing the command line)."""
    try:
        return compose(config_name, hydra=True)
    except (HydraException, ConfigError):
        return None


def repeated_group(overrides: Sequence[str], groups: set[str], _config: RootConfig) -> str | None:
    """One line for a group added twice (``+padding=symmetric +padding=asymmetric``), which Hydra
    answers in its config files' syntax (``override padding: asymmetric``)."""
    added: dict[str, list[str]] = {}
    for typed in overrides:
        key = typed.lstrip("+").partition("=")[0]
        if typed.startswith("+") and "=" in typed and "." not in key and re.split(r"[/@]", key)[0] in groups:
            added.setdefault(key, []).append(typed)
    for key, typed in added.items():
        if len(typed) > 1:
            values = [t.partition("=")[2] for t in typed]
            options = " or ".join(f"+{key}={value}" for value in values)
            sweep = all(PRESET_NAME.fullmatch(value) for value in values)  # names a sweep can list
            each = f" (each in turn: -m +{key}={','.join(values)})" if sweep else ""
            return f"{' '.join(typed)}: {key} takes one option; choose one: {options}{each}"
    return None


def unknown_addition(overrides: Sequence[str], groups: set[str], config: RootConfig) -> str | None:
    """One line for a ``+`` override outside every config group (``+paddng=asymmetric``), or a
    ``++`` outside every group and every key of the command's ``config`` (``++paddng=asymmetric``):
    Hydra adds it as a new key, which nothing reads, and the run goes on without what was meant.
    The nearest group or key is named with the override that works."""
    for typed in overrides:
        plus = len(typed) - len(typed.lstrip("+"))
        key, equals, value = typed[plus:].partition("=")
        root = re.split(r"[./]", key.split("@")[0])[0]  # +padding.stem_pool=, +data/base=, +hydra/launcher=
        if plus not in (1, 2) or not equals or root in groups:
            continue
        cfg = config() if plus == 2 else None
        if plus == 2 and (cfg is None or root in cfg):  # ++optim.lr=0.1: a key the config has, set
            continue
        keys = sorted(str(k) for k in cfg if k != "hydra") if cfg is not None else []
        near = difflib.get_close_matches(root, sorted(groups | set(keys)), n=1)
        hint = f"did you mean {_addition(near[0], key[len(root) :], value, groups, keys)}? " if near else ""
        listed = f"; its keys: {', '.join(keys)}" if keys else ""
        return (
            f"{typed}: there is no config group {'or key ' if keys else ''}'{root}' to add, and a key added "
            f"with {'+' * plus} would be read by nothing; {hint}the groups: "
            f"{', '.join(sorted(g for g in groups if g != 'hydra'))}{listed}"
        )
    return None


def _addition(root: str, rest: str, value: str, groups: set[str], keys: Sequence[str]) -> str:
    """The override that sets ``<root><rest>`` to ``value``, ``root`` a group or a key of the config."""
    if root not in keys:  # a group outside the defaults: +padding=asymmetric, +padding.stem_conv=same
        return f"+{root}{rest}={value}"
    if root in groups and not rest:  # a group of the defaults, chosen: data=synthetic
        return f"{root}={value}"
    return f"++{root}{rest}={value}"


def forced_group(overrides: Sequence[str], groups: set[str], config: RootConfig) -> str | None:
    """One line for ``++`` on a config group (``++data=synthetic``), which Hydra refuses without
    saying what to type: the group chosen (one of the config's defaults) or added with ``+``.
    ``++padding=`` is read as ``+padding=`` (:func:`_scheme_overrides`)."""
    for typed in overrides:
        key, equals, value = typed.removeprefix("++").partition("=")
        group = key.split("@")[0]
        if typed.startswith("++") and equals and "." not in group and group.split("/")[0] in groups - {"padding"}:
            cfg = config()
            prefix = "" if cfg is not None and group in cfg.hydra.runtime.choices else "+"  # chosen, or added
            return f"{typed}: {group} is a config group, which ++ does not add; did you mean {prefix}{key}={value}?"
    return None


def _scheme_overrides(typed: str) -> list[str]:
    """``typed``, or for ``+padding=<name>`` / ``++padding=<name>`` the overrides that select that
    scheme (quotes around the name allowed); a sweep takes preset names only."""
    scheme = re.fullmatch(r"\+\+?padding=(.*)", typed, re.S)
    if scheme is None:
        return [typed]
    value = scheme[1]
    name = value[1:-1] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else value
    if _per_site_name(name):
        try:
            return padding_overrides(name)
        except ValueError as err:
            raise ConfigError(f"{typed}: {err}") from None
    sweep = re.split(r",(?![^\[(]*[\])])", value)  # commas outside a name's brackets and parentheses
    named = [item for item in sweep if _per_site_name(item)]
    if len(sweep) > 1 and named:
        raise ConfigError(
            f"{typed}: a sweep of +padding= takes preset names, not a scheme's own name as {named[0]}; "
            "sweep a site with +padding.<site>=a,b (e.g. -m +padding=tf_same +padding.stem_pool=same,symmetric)"
        )
    return [f"+padding={value}"]


def _per_site_name(text: str) -> bool:
    """Whether ``text`` is a scheme's name that Hydra cannot read as one option: a preset with
    per-site parts or blurred sites (``tf_same[stem_pool=symmetric]``, ``symmetric+blur(block_conv)``)."""
    parsed = SCHEME_NAME.fullmatch(text)
    return parsed is not None and parsed["preset"] != text and PRESET_NAME.fullmatch(parsed["preset"]) is not None


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
        run_main(_main, config_name)
        return None

    return main


def program_name(installed: str) -> str:
    """How the user started this command, for its messages: ``train.py`` / ``eval.py`` for the
    checkout's script (directly or under torchrun), else the installed name (``resnet-train``,
    ``resnet-regrid``), which ``python -m resnet.cli.<name>`` runs too."""
    started = Path(sys.argv[0]).name if sys.argv else ""
    return started if started in ("train.py", "eval.py") and started_from_checkout() else installed
