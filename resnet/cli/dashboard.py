"""Save the project's W&B workspace: validation curves and train images/s per padding scheme, the padding tables.

``resnet-dashboard --entity E [--project P] [--dry-run spec.json]``: one saved workspace (a view of the
project's runs page) built with ``wandb-workspaces``, the ``dashboard`` extra (``pip install
'resnet-padding[dashboard]'``; in a checkout ``pip install -e '.[dashboard]'``); what its panels and runs
table show: docs/training.md. ``--dry-run`` writes what the save would send (the view's spec as the library
serializes it) and touches no network and needs no login, but the extra all the same; without it the
workspace is saved to ``ENTITY/PROJECT``, which needs ``wandb login`` (or ``WANDB_API_KEY``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ..command_lines import install_extra

# What train.py and eval.py log (resnet/engine/runlog.py, resnet/report/wandb_log.py);
# tests/report/test_dashboard.py checks each against an offline run's files.
EPOCH = "epoch/epoch"  # the x axis of the per-epoch curves
VAL_TOP1 = "epoch/val_top1_err"
VAL_TOP5 = "epoch/val_top5_err"
STEP_IMAGES_PER_S = "train/images_per_s"  # every log_every steps
EPOCH_IMAGES_PER_S = "epoch/train_images_per_s"  # each epoch's mean
TABLES = ("padding/tensornets", "padding/cross", "eval/rows")  # per-scheme table, cross matrix, eval rows
SUMMARY = ("trained_padding", "padding_name", "top1_err", "top5_err", "train_images_per_s")  # results.json / eval rows
GROUP = "Group"  # the W&B run group: the trained scheme, grid[a,b] included (run_group; logger.group overrides it)

MAX_RUNS = 60  # runs (or groups) per panel; W&B's default, 10, would cut a grid of schemes x seeds short
PROJECT = "resnet-padding"  # configs/logger/wandb.yaml
NAME = "ResNet padding schemes"
USAGE = "resnet-dashboard --entity ENTITY [--project PROJECT] [--dry-run spec.json]"
EXTRA = "dashboard"  # pyproject.toml's extra that brings wandb-workspaces


def build_workspace(entity: str, project: str = PROJECT, name: str = NAME):
    """The workspace (``wandb_workspaces.workspaces.Workspace``), not saved."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    def per_scheme(title: str, y: str, x: str = EPOCH) -> wr.LinePlot:
        return wr.LinePlot(title=title, x=x, y=[y], groupby=GROUP, groupby_aggfunc="mean",
                           groupby_rangefunc="minmax")  # fmt: skip

    validation = ws.Section(name="Validation error per padding scheme", is_open=True, panels=[
        per_scheme("val top-1 error (%)", VAL_TOP1),
        per_scheme("val top-5 error (%)", VAL_TOP5),
    ])  # fmt: skip
    throughput = ws.Section(name="Train images/s per padding scheme", is_open=True, panels=[
        per_scheme("train images/s", STEP_IMAGES_PER_S, x="Step"),
        per_scheme("train images/s (epoch mean)", EPOCH_IMAGES_PER_S),
    ])  # fmt: skip
    tables = ws.Section(
        name="Padding tables (eval.py logger=wandb)", is_open=True,
        panels=[wr.WeavePanelSummaryTable(table_name=key) for key in TABLES],
        layout_settings=ws.SectionLayoutSettings(columns=1, rows=1),
    )  # fmt: skip
    return ws.Workspace(
        entity=entity,
        project=project,
        name=name,
        sections=[validation, throughput, tables],
        settings=ws.WorkspaceSettings(max_runs=MAX_RUNS),
        # Grouped runs table: panels follow it (each section's useRunsTableGroupingInPanels).
        runset_settings=ws.RunsetSettings(
            groupby=[ws.Metric(GROUP)], pinned_columns=[f"summary:{key}" for key in SUMMARY]
        ),  # fmt: skip
    )


def save(workspace) -> str:
    """Save to W&B; the view's URL. A missing key or a refusal: a ConfigError (one line)."""
    import wandb

    from ..config import ConfigError

    mode = os.environ.get("WANDB_MODE")
    if mode in ("offline", "disabled", "dryrun"):
        raise ConfigError(f"WANDB_MODE={mode}: saving a workspace needs the W&B server; unset WANDB_MODE, "
                          "or write the spec without it: --dry-run spec.json")  # fmt: skip
    try:
        from wandb.sdk.lib.service.service_connection import WandbApiFailedError
    except ImportError:  # another wandb: its errors are wandb.errors.Error
        WandbApiFailedError = wandb.errors.Error  # noqa: N806
    try:
        workspace.save()
    except wandb.errors.UsageError as err:  # no API key: wandb.Api() refuses before any request
        what = "no W&B API key" if "api key" in str(err).lower() else _first_line(err).rstrip(".")
        raise ConfigError(f"{what}: run `wandb login` (or set WANDB_API_KEY), or write the spec offline: "
                          "--dry-run spec.json") from None  # fmt: skip
    except (wandb.errors.Error, WandbApiFailedError) as err:
        raise ConfigError(
            f"W&B did not save the workspace to {workspace.entity}/{workspace.project} "
            f"({_first_line(err)}): check --entity and --project, and `wandb login`"
        ) from None
    return workspace.url


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, through resnet.cli.one_line_errors
        from ..config import ConfigError

        raise ConfigError(f"{message}; type: {USAGE} (--help: every option)")


def main(argv: list[str] | None = None) -> None:
    from ..config import ConfigError
    from .errors import one_line_errors

    parser = _Parser(prog="resnet-dashboard", description=__doc__.splitlines()[0])
    parser.add_argument("--entity", required=True, help="the W&B user or team that owns the project")
    parser.add_argument("--project", default=PROJECT, help=f"the W&B project of the runs (default: {PROJECT})")
    parser.add_argument("--name", default=NAME, help=f"the workspace's name (default: {NAME!r})")
    parser.add_argument("--dry-run", type=Path, metavar="SPEC.json",
                        help=f"write what would be saved to this file and save nothing: no network, no login "
                             f"(the {EXTRA} extra all the same)")  # fmt: skip
    with one_line_errors("resnet-dashboard"):
        args = parser.parse_args(argv)
        for option in ("entity", "project", "name"):
            if not getattr(args, option).strip():
                parser.error(f"--{option} is empty")
        try:
            workspace = build_workspace(args.entity, args.project, args.name)
        except ImportError as err:  # the extra is not installed
            raise ConfigError(f"resnet-dashboard needs its {EXTRA} extra ({_first_line(err)}), --dry-run too "
                              f"(wandb-workspaces writes the spec): {install_extra(EXTRA)}") from None  # fmt: skip
        except ValueError as err:  # pydantic's: a name with an emoji
            why = err.errors()[0]["msg"] if hasattr(err, "errors") else _first_line(err)
            raise ConfigError(f"the workspace cannot be named {args.name!r}: {why}") from None
        if args.dry_run:  # what Workspace.save() sends (wandb_workspaces.workspaces.internal.upsert_view2),
            view = workspace._to_model()  # less the view's generated name: the spec is the library's serialization
            spec = json.loads(view.spec.model_dump_json(by_alias=True, exclude_none=True))
            request = {"entityName": view.entity, "projectName": view.project, "displayName": view.display_name,
                       "type": "project-view", "spec": spec}  # fmt: skip
            try:
                args.dry_run.parent.mkdir(parents=True, exist_ok=True)
                args.dry_run.write_text(json.dumps(request, indent=2) + "\n")
            except OSError as err:
                raise ConfigError(f"could not write {args.dry_run}: {err.strerror or err}") from None
            print(f"wrote {args.dry_run}: workspace {args.name!r} for {args.entity}/{args.project}, not saved")
        else:
            print(f"saved workspace {args.name!r}: {save(workspace)}")


if __name__ == "__main__":
    main()
