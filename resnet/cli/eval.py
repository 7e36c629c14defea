"""``resnet-eval``: evaluate trained or published weights, under their own padding or any other
(``configs/eval.yaml``). The checkout's ``eval.py`` runs this same app. Every run appends one row
to results/eval.jsonl (results_file=...).

    resnet-eval weights=outputs/<run>/last.pt data=fashion_mnist
    resnet-eval weights=timm:resnet50.a1_in1k data.root=/data/imagenet +padding=asymmetric
"""

from omegaconf import DictConfig

from .hydra_app import hydra_command


def evaluate(cfg: DictConfig) -> float:
    """One evaluation: its row's top-1 error (a bad value, bad weights, a dead loader worker: one line)."""
    from ..evaluation.run import evaluate_weights

    return evaluate_weights(cfg)["top1_err"]


main = hydra_command("eval", "resnet-eval", evaluate)


if __name__ == "__main__":
    main()
