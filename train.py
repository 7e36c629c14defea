"""Train a ResNet-family model; the padding of every stride-2 site comes from the config.

    python train.py                                   # built-in demo: Fashion-MNIST on CPU
    python train.py +padding=asymmetric               # TF 'SAME' stem (TensorNets "Case 1")
    python train.py model=resnet50 data=imagenet data.root=/data/imagenet
    torchrun --nproc_per_node=8 train.py +experiment=tv_v1 data.root=/data/imagenet

Configs live in configs/ (train.yaml is the root); docs/training.md has every form.
"""

from resnet import stop

stop.catch()  # first: a stop signal (SLURM's USR1, a preemption's TERM, Ctrl-C) during start-up is acted on too

import hydra  # noqa: E402 (after the signals are caught)
from omegaconf import DictConfig  # noqa: E402

from resnet.config import register_configs  # noqa: E402


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    stop.catch()  # where submitit runs this function in its own process, this is its first line there
    from resnet.cli import one_line_errors
    from resnet.engine.run import train

    # a bad config or data: status 2; the run failed: 1; stopped by a signal: saved, 0 when requeued,
    # else 143 (TERM), 130 (INT), 129 (HUP) or 3 (USR1); another process of the job lost: 75 (requeue it)
    with one_line_errors("train.py", training=True):
        results = train(cfg)
    return results["top1_err"]  # what a Hydra sweeper would minimise


if __name__ == "__main__":
    from resnet.cli.hydra_app import run_main

    register_configs()  # model=<arch> and padding=<preset>, generated from the tables
    run_main(main)  # a config Hydra cannot compose: one line, status 2
