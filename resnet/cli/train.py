"""``resnet-train``: train a ResNet-family model; the padding of every stride-2 site comes from
the config (``configs/train.yaml``). The checkout's ``train.py`` runs this same app.

    resnet-train                                      # built-in demo: Fashion-MNIST
    resnet-train +padding=asymmetric                  # TF 'SAME' stem (TensorNets "Case 1")
    torchrun --nproc_per_node=8 -m resnet.cli.train +experiment=tv_v1 data.root=/data/imagenet
"""

from omegaconf import DictConfig

from ..job import signals
from .hydra_app import hydra_command


def train(cfg: DictConfig) -> float | None:
    """One training run; its top-1 error is what a Hydra sweeper minimises. A bad config or data:
    status 2; the run failed: 1; stopped by a signal: saved, 0 when requeued, else 143 (TERM), 130
    (INT), 129 (HUP) or 3 (USR1); another process of the job lost: 75 (requeue it)."""
    signals.catch()  # where submitit runs this function in its own process, this is its first line there
    from ..engine.run import train as train_run

    return train_run(cfg)["top1_err"]


_command = hydra_command("train", "resnet-train", train, training=True)


def main(cfg: DictConfig | None = None) -> float | None:
    """The command (``cfg``: a composed config instead of ``sys.argv``'s overrides). Its first act
    catches the stop signals (SLURM's USR1, a preemption's TERM, Ctrl-C), so one during start-up is
    acted on too; importing this module does not (a test, the demo: their own handlers stay)."""
    signals.catch()
    return _command(cfg)


if __name__ == "__main__":
    main()
