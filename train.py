"""Train a ResNet-family model; the padding of every stride-2 site comes from the config.

    python train.py                                   # built-in demo: Fashion-MNIST on CPU
    python train.py +padding=asymmetric               # TF 'SAME' stem (TensorNets "Case 1")
    python train.py model=resnet50 data=imagenet data.root=/data/imagenet
    torchrun --nproc_per_node=8 train.py +experiment=tv_v1 data.root=/data/imagenet

Configs live in configs/ (train.yaml is the root); see the README for every form.
"""

import sys

import hydra
from omegaconf import DictConfig

from resnet.config import register_configs


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from resnet.config import ConfigError
    from resnet.engine.loop import NonFiniteLoss
    from resnet.engine.preempt import Stopped
    from resnet.engine.run import RunFailed, train

    try:
        results = train(cfg)
    except (ConfigError, NonFiniteLoss, RunFailed) as err:  # one line, no traceback
        print(f"error: {err}", file=sys.stderr)  # status 2: fix the config or data; 1: the run failed
        raise SystemExit(2 if isinstance(err, ConfigError) else 1) from None
    except Stopped as stopped:  # a preemption signal: saved; 0 when the requeued job goes on, else 3
        print(stopped, file=sys.stderr)
        raise SystemExit(0 if stopped.requeued else 3) from None
    return results["top1_err"]  # what a Hydra sweeper would minimise


if __name__ == "__main__":
    register_configs()  # model=<arch> and padding=<preset>, generated from the tables
    main()
