"""Train a ResNet-family model; the padding of every stride-2 site comes from the config.

    python train.py                                   # built-in demo: Fashion-MNIST on CPU
    python train.py +padding=asymmetric               # TF 'SAME' stem (TensorNets "Case 1")
    python train.py model=resnet50 data=imagenet data.root=/data/imagenet
    torchrun --nproc_per_node=8 train.py +experiment=tv_v1 data.root=/data/imagenet

Configs live in configs/ (train.yaml is the root); docs/training.md has every form. The app is
resnet/cli/train.py, installed as ``resnet-train``.
"""

from resnet.job import signals

signals.catch()  # first: a stop signal (SLURM's USR1, a preemption's TERM, Ctrl-C) during start-up is acted on too

from resnet.cli.train import main  # noqa: E402 (after the signals are caught)

if __name__ == "__main__":
    main()
