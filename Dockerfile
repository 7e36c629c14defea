# PyTorch with CUDA and this project, installed the same way as the README's set-up
# (pip install -e ".[test]"): torch, then the other dependencies, then the code, in layers that
# change at different speeds.
#   docker build -t resnet-padding .
#   docker run --gpus all --ipc=host -v /data/imagenet:/data/imagenet resnet-padding \
#       python train.py +padding=asymmetric data=imagenet data.root=/data/imagenet
#   docker run --gpus all --ipc=host ... resnet-padding torchrun --nproc_per_node=8 train.py ...
# Python 3.11 as the README; torch's Linux wheels carry their CUDA libraries, so the host needs
# only an NVIDIA driver and the container toolkit (--gpus all). Without Docker Hub,
# `bash scripts/docker_check.sh` makes a base from Debian packages and builds with it.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
# The torch the suite runs with (docs/cluster.md, "Docker"); pyproject.toml allows a range.
ARG TORCH_VERSION=2.14.1
ARG TORCHVISION_VERSION=0.29.1
# Extra places pip looks for wheels first, e.g. a local mirror (scripts/docker_check.sh serves
# this host's): on a tie with PyPI, pip takes the find-links copy. Empty: PyPI alone.
ARG PIP_FIND_LINKS=

ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WANDB_DIR=/workspace/resnet-padding/wandb

# Debian's Fashion-MNIST where the base's apt has it (scripts/get_data.sh falls back below).
RUN apt-get update -q \
    && (apt-get install -y -q --no-install-recommends git dataset-fashion-mnist \
        || apt-get install -y -q --no-install-recommends git) \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 app
WORKDIR /workspace/resnet-padding

# 1. torch and torchvision, pinned: the largest layer, rebuilt only when the versions change.
RUN python -m pip install --no-cache-dir "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}"
# 2. every other dependency and the build backend, read from pyproject.toml alone: rebuilt only
#    when it changes.
COPY pyproject.toml ./
RUN python -c "import tomllib; t = tomllib.load(open('pyproject.toml', 'rb')); p = t['project']; \
print('\n'.join(t['build-system']['requires'] + p['dependencies'] + p['optional-dependencies']['test']))" \
        > /tmp/requirements.txt \
    && python -m pip install --no-cache-dir -r /tmp/requirements.txt \
        "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}" \
    && rm /tmp/requirements.txt
# 3. the code, then one layer that installs it (--no-deps, and the backend from layer 2: it
#    fetches nothing), checks the built-in data and hands the tree to the user. Each layer after
#    torch is a full copy of the image under the vfs storage driver: few of them.
COPY resnet ./resnet
COPY data ./data
COPY benchmarks ./benchmarks
COPY configs ./configs
COPY scripts ./scripts
COPY tests ./tests
COPY README.md train.py eval.py ./
RUN python -m pip install --no-cache-dir --no-deps --no-build-isolation -e ".[test]" \
    && FASHION_MNIST_ROOT=/usr/share/datasets/fashion-mnist bash scripts/get_data.sh python \
    && chown -R app:app /workspace/resnet-padding

USER app
# python train.py: the demo's recipe on its full schedule (README); resnet-demo is the
# demo's three models and tables.
CMD ["python", "train.py"]
