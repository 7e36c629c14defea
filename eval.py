"""Evaluate trained or published weights, under their own padding or any other.

    python eval.py weights=outputs/<run>/last.pt data=fashion_mnist
    python eval.py weights=torchvision:ResNet50_Weights.IMAGENET1K_V1 data.root=/data/imagenet
    python eval.py weights=timm:resnet50.a1_in1k data.root=/data/imagenet +padding=asymmetric
    python eval.py weights=keras:/models/resnet50v2.h5 data.root=/data/imagenet crops=10
    torchrun --nproc_per_node=8 eval.py weights=... data.root=/data/imagenet

Every run appends one row to results/eval.jsonl (results_file=...). configs/eval.yaml
lists every option.
"""


import hydra
from omegaconf import DictConfig

from resnet.config import register_configs


@hydra.main(config_path="configs", config_name="eval", version_base="1.3")
def main(cfg: DictConfig) -> float:
    from resnet.cli import one_line_errors
    from resnet.evaluation.run import evaluate_weights

    with one_line_errors("eval.py"):  # a bad value, bad weights, a dead loader worker: one line
        row = evaluate_weights(cfg)
    return row["top1_err"]


if __name__ == "__main__":
    from resnet.cli.hydra_app import run_main

    register_configs()  # model=<arch> and padding=<preset>, generated from the tables
    run_main(main)  # a config Hydra cannot compose: one line, status 2
