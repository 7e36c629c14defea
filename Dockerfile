# CUDA-enabled PyTorch with this project installed the same way as the README
# (pip install -e ".[test]" into the image's Python, which already has CUDA torch).
#   docker build -t resnet-padding .
#   docker run --gpus all --ipc=host -v /data/imagenet:/data/imagenet resnet-padding \
#       python train.py +padding=asymmetric data=imagenet data.root=/data/imagenet
#   docker run --gpus all --ipc=host ... resnet-padding torchrun --nproc_per_node=8 train.py ...
ARG BASE_IMAGE=pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WANDB_DIR=/workspace/resnet-padding/wandb

RUN apt-get update -q \
    && (apt-get install -y -q --no-install-recommends git dataset-fashion-mnist \
        || apt-get install -y -q --no-install-recommends git) \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 1000 app
WORKDIR /workspace/resnet-padding

# Dependencies first (cached across code changes), then the code.
COPY pyproject.toml README.md ./
COPY resnet ./resnet
COPY data ./data
COPY benchmarks ./benchmarks
RUN python -m pip install --no-cache-dir -e ".[test]"
COPY configs ./configs
COPY scripts ./scripts
COPY tests ./tests
COPY train.py eval.py ./
# Built-in data: apt above, else torchvision's download to the same place, at build time.
RUN FASHION_MNIST_ROOT=/usr/share/datasets/fashion-mnist bash scripts/get_data.sh python \
    && chown -R app:app /workspace/resnet-padding

USER app
CMD ["python", "train.py"]
