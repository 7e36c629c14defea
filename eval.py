"""Evaluate trained or published weights, under their own padding or any other.

    python eval.py weights=outputs/<run>/last.pt data=fashion_mnist
    python eval.py weights=torchvision:ResNet50_Weights.IMAGENET1K_V1 data.root=/data/imagenet
    python eval.py weights=timm:resnet50.a1_in1k data.root=/data/imagenet +padding=asymmetric
    python eval.py weights=keras:/models/resnet50v2.h5 data.root=/data/imagenet crops=10
    torchrun --nproc_per_node=8 eval.py weights=... data.root=/data/imagenet

Every run appends one row to results/eval.jsonl (results_file=...). configs/eval.yaml
lists every option.
"""

import sys

import hydra
from omegaconf import DictConfig

from resnet.config import register_configs


@hydra.main(config_path="configs", config_name="eval", version_base="1.3")
def main(cfg: DictConfig) -> float:
    from resnet.config import ConfigError
    from resnet.evaluation.run import evaluate_weights
    from resnet.weights import WeightsError

    try:
        row = evaluate_weights(cfg)
    except ConfigError as err:  # a bad config value or data layout: one line, no traceback, status 2
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except WeightsError as err:  # a bad or missing weights= value: one line, no traceback
        raise SystemExit(f"eval.py: {err}") from None
    except RuntimeError as err:  # a loader worker died (data.dataloader): nothing was written
        if "DataLoader worker" not in str(err):
            raise
        print(f"error: {err}: lower data.workers or batch_size, then run again", file=sys.stderr)
        raise SystemExit(1) from None
    return row["top1_err"]


if __name__ == "__main__":
    register_configs()  # model=<arch> and padding=<preset>, generated from the tables
    main()
