# PyTorch with CUDA and this project, installed the same way as the README's set-up
# (pip install -e ".[test]"), in three layers that change at different speeds.
#   docker build -t resnet-padding .
#   docker run --gpus all --ipc=host -v /data/imagenet:/data/imagenet resnet-padding \
#       python train.py +padding=asymmetric data=imagenet data.root=/data/imagenet
#   docker run --gpus all --ipc=host ... resnet-padding torchrun --nproc_per_node=8 train.py ...
# Python 3.11 as the README; torch's Linux wheels carry their CUDA libraries, so the host needs
# only an NVIDIA driver and the container toolkit (--gpus all).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
# The torch this project's suite last ran with (README, "Docker"); pyproject.toml allows a range.
ARG TORCH_VERSION=2.15.0
ARG TORCHVISION_VERSION=0.29.2

ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WANDB_DIR=/workspace/resnet-padding/wandb

RUN apt-get update -q \
    && (apt-get install -y -q --no-install-recommends git dataset-fashion-mnist \
        || apt-get install -y -q --no-install-recommends git) \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 1000 app
WORKDIR /workspace/resnet-padding

# 1. torch and torchvision, pinned: the largest layer, rebuilt only when the versions change.
RUN python -m pip install --no-cache-dir "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}"
# 2. every other dependency, read from pyproject.toml alone: rebuilt only when it changes.
COPY pyproject.toml ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['test']))" > /tmp/requirements.txt \
    && python -m pip install --no-cache-dir -r /tmp/requirements.txt "torch==${TORCH_VERSION}" \
    && rm /tmp/requirements.txt
# 3. the code: a change here rebuilds only what follows, and the install fetches nothing.
COPY README.md ./
COPY resnet ./resnet
COPY data ./data
COPY benchmarks ./benchmarks
RUN python -m pip install --no-cache-dir --no-deps -e ".[test]"
COPY configs ./configs
COPY scripts ./scripts
COPY tests ./tests
COPY train.py eval.py ./
# Built-in data: apt above, else torchvision's download to the same place, at build time.
RUN FASHION_MNIST_ROOT=/usr/share/datasets/fashion-mnist bash scripts/get_data.sh python \
    && chown -R app:app /workspace/resnet-padding

USER app
CMD ["python", "train.py"]
