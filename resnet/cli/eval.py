"""``resnet-eval``: evaluate trained or published weights, under their own padding or any other
(``configs/eval.yaml``). The checkout's ``eval.py`` runs this same app. Every run appends one row
to results/eval.jsonl (results_file=...). Without ``data=``, a checkpoint of ``train.py`` is
evaluated on the data it was trained on; published weights on ImageNet.

    resnet-eval weights=outputs/<run>/last.pt
    resnet-eval weights=timm:resnet50.a1_in1k data.root=/data/imagenet +padding=asymmetric
"""

from omegaconf import DictConfig

from .hydra_app import hydra_command


def evaluate(cfg: DictConfig) -> float:
    """One evaluation: its row's top-1 error (a bad value, bad weights, a dead loader worker: one line)."""
    from hydra.core.hydra_config import HydraConfig

    from ..evaluation.run import evaluate_weights
    from ..evaluation.trained_data import with_trained_data

    typed = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    cfg, trained_data = with_trained_data(cfg, typed)
    return evaluate_weights(cfg, trained_data=trained_data)["top1_err"]


main = hydra_command("eval", "resnet-eval", evaluate)


if __name__ == "__main__":
    main()
