"""``resnet-regrid``: move weights to another padding grid, save them.

    resnet-regrid weights=outputs/<run>/last.pt +padding=symmetric out=regridded.pt        # built-in data
    resnet-regrid weights=keras:/models/resnet50.h5 +padding=symmetric method=distill out=r50.pt ...

Reads the weights and a sample of training images as ``eval.py`` reads them, re-grids by
``method`` (:func:`resnet.regrid.regrid`) and saves a checkpoint (``configs/regrid.yaml``).
"""

from __future__ import annotations

from ..regrid import regrid
from .hydra_app import hydra_command


def target_padding(cfg, spec, loaded):
    """The padding to move the weights to: ``+padding=``'s, refused where the weights are under it
    already or hold its BatchNorm (a grid model: eval.py runs it as it is)."""
    from ..command_lines import app_words, command, override
    from ..config import ConfigError, padding_from_config
    from ..padding import PRESETS, resolve_padding

    source = loaded.model
    try:
        target = resolve_padding(padding_from_config(cfg), native=source.meta.padding)
    except (ValueError, TypeError) as err:
        raise ConfigError(str(err).splitlines()[0]) from None
    if target == source.meta.padding:
        others = [f"+padding={name}" for name in PRESETS if name != target.name][:2]
        raise ConfigError(
            f"{spec.text} is already under {target.name}: pass the grid to move to, e.g. {' or '.join(others)}"
        )
    if target.name in loaded.preset_norms:  # a grid model holds this preset's own BatchNorm already
        evaluate = command([*app_words("eval"), override("weights", spec.text), f"+padding={target.name}"])
        raise ConfigError(
            f"{spec.text} was trained for {target.name} ({loaded.trained_for}): {evaluate} runs it with its own "
            "BatchNorm, no re-gridding"
        )
    return target


def run(cfg) -> dict:
    """The command's work (``configs/regrid.yaml``): read the weights and the sample, re-grid, save."""
    import time

    from data import Normalize

    from ..checkpoint import save_checkpoint
    from ..config import ConfigError, check_run_config, config_device
    from ..evaluation.loader import open_eval_data
    from ..evaluation.protocol import check_fit, load_once, single_crop_protocol, weights_spec
    from ..evaluation.sample import read_images
    from ..out_files import out_file
    from ..report.console import format_table
    from ..report.rows import weights_label

    spec = weights_spec(cfg)
    if cfg.get("padding") is None:
        raise ConfigError("say which grid to move the weights to: +padding=<preset>, e.g. +padding=symmetric")
    check_run_config(cfg)  # method, images, batch_size, epochs, lr, features: their declarations; the data
    out = out_file(cfg.out, ".pt", "out=regridded.pt")
    device = config_device(cfg.device)
    loaded = load_once(cfg, spec)
    source = loaded.model
    target = target_padding(cfg, spec, loaded)
    protocol = single_crop_protocol(cfg, source.meta, loaded.origin)
    data = open_eval_data(cfg.data, protocol, cfg.batch_size, split="train")
    check_fit(source.meta, data)
    trained = loaded.trained_for or source.meta.padding_name  # grid[a,b]: trained under each of those
    label = weights_label({"weights": spec.text, "ema": cfg.ema})
    print(
        f"{label}: a {source.meta.arch} trained under {trained}; re-gridding to "
        f"{target.name} by {cfg.method} on up to {cfg.images} training images of {cfg.data.name}",
        flush=True,
    )
    batches, skipped = read_images(data, protocol, cfg.images, cfg.batch_size)
    images = [x.to(device) for x, _ in batches]
    normalize = Normalize(protocol.preprocessing).to(device)
    start = time.perf_counter()
    model, report = regrid(
        source.to(device), target, cfg.method, images, normalize, epochs=cfg.epochs, lr=cfg.lr, features=cfg.features
    )
    report |= {
        "from_padding": trained,
        "from": spec.text,
        "ema": bool(cfg.ema),
        "images": sum(x.shape[0] for x in images),
        "skipped_images": skipped,
        "seconds": round(time.perf_counter() - start, 2),
        "dataset": cfg.data.name,
        "split": "train",
    }
    save_checkpoint(out, model.cpu(), regrid=report)
    summary = {
        "weights": label,
        "grid": f"{report['from_padding']} -> {report['to_padding']}",
        "method": cfg.method,
        "images": report["images"],
        "seconds": report["seconds"],
        "written": str(out),
    }
    print("\n" + format_table([summary]), flush=True)
    return report


main = hydra_command("regrid", "resnet-regrid", run)


if __name__ == "__main__":
    main()
