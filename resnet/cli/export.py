"""``resnet-export``: ONNX with every pad explicit, checked against onnxruntime.

    resnet-export weights=outputs/<date>/<time>/last.pt out=tiny.onnx
    resnet-export weights=timm:resnet50.a1_in1k out=resnet50.onnx download=true +padding=asymmetric

Loads weights as ``eval.py`` does, exports them for their evaluation crop and checks the file
(:func:`resnet.export.export_checked`) before moving it into place (``configs/export.yaml``).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ..config import ConfigError, check_schema, padding_from_config
from ..export import OnnxMismatch, export_checked, missing_export_tools
from ..out_files import out_file
from .hydra_app import hydra_command


def run(cfg: DictConfig) -> Path:
    """Export ``cfg.weights`` to ``cfg.out`` as ``configs/export.yaml`` says, checked against onnxruntime."""
    from ..evaluation.protocol import load_once, padded_as_configured, weights_spec
    from ..padding import resolve_padding

    missing = missing_export_tools()
    if missing is not None:
        raise SystemExit(f"resnet-export: {missing}")
    spec = weights_spec(cfg)
    if OmegaConf.is_missing(cfg, "out") or cfg.out is None:
        raise ConfigError("say where to write the file: out=model.onnx")
    out = out_file(cfg.out, ".onnx", "out=model.onnx")
    check_schema(cfg)  # crop, opset, tolerance: their declarations
    try:
        resolve_padding(padding_from_config(cfg))  # an unknown site or scheme fails before the weights load
    except (ValueError, TypeError) as err:
        raise ConfigError(str(err)) from None

    loaded = load_once(cfg, spec)
    model = padded_as_configured(cfg, loaded.model, loaded.preset_norms)
    size = cfg.crop or loaded.origin.crop or model.meta.eval_size  # eval.py's crop (resolve_protocol)
    try:
        checks = export_checked(
            model, out, size, cfg.opset, cfg.tolerance, props={"weights": spec.text, "ema": str(bool(cfg.ema)).lower()}
        )
    except OSError as err:  # the folder checked above went away, or the disk is full
        raise ConfigError(f"cannot write {out}: {err.strerror or err}; choose another out=...onnx") from None
    meta = model.meta
    print(
        f"exported {out}: {meta.arch} under {meta.padding_name} padding, input [batch, {meta.in_chans}, {size}, "
        f"{size}] ({meta.preprocessing} preprocessing), opset {cfg.opset}, {out.stat().st_size / 2**20:.1f} MB\n"
        f"checked against onnxruntime on random images, max |logit difference| "
        f"(allowed: {cfg.tolerance:.0e} x max(1, max |logit|)):"
    )
    for n, difference, allowed in checks:
        print(f"  batch {n}: {difference:.1e} (allowed {allowed:.1e})")
    return out


def _run(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except OnnxMismatch as err:  # the file was not written
        raise SystemExit(f"resnet-export: {err}; {cfg.out} was not written") from None


main = hydra_command("export", "resnet-export", _run)


if __name__ == "__main__":
    main()
