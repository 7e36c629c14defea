# PyTorch with CUDA and this project, installed the same way as the README's set-up
# (pip install -e ".[test]"): torch, then the other dependencies, then the code, in layers that
# change at different speeds.
#   docker build -t resnet-padding .
#   docker run --gpus all --ipc=host -v /data/imagenet:/data/imagenet -v runs:/workspace/resnet-padding/outputs \
#       resnet-padding python train.py +padding=asymmetric data=imagenet data.root=/data/imagenet
#   docker run ... resnet-padding torchrun --standalone --local-addr=127.0.0.1 --nproc_per_node=8 train.py ...
# Python 3.11 as the README; torch's Linux wheels carry their CUDA libraries, so the host needs
# only an NVIDIA driver and the container toolkit (--gpus all). Without Docker Hub,
# `bash scripts/docker_check.sh` makes a base from Debian packages and builds with it.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
# The torch the suite runs with (docs/cluster.md, "Docker"); pyproject.toml allows a range.
ARG TORCH_VERSION=2.14.1
ARG TORCHVISION_VERSION=0.29.1

# RESNET_PADDING_ENV=installed: scripts/test.sh runs the suite on this interpreter instead of
# making a .venv (the image has no network to make one with, and needs none).
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RESNET_PADDING_ENV=installed

# tini: PID 1 that passes docker stop's SIGTERM on to train.py (which saves and exits) and reaps
# loader workers; Python as PID 1 would ignore SIGTERM until the SIGKILL 10 s later.
# gcc, g++ and the Python headers: torch.compile builds its CPU kernels and Triton its GPU launcher
# with them (a Debian-made base's Python gets its headers from python3-dev, whose upgrade of
# python3.11 brings back the PEP 668 marker: pip installs system-wide here, as in the official
# image). git: the run's commit in results. Fashion-MNIST from Debian where the base's apt has
# it (scripts/get_data.sh falls back below).
RUN apt-get update -q \
    && headers=$(python -c "import sysconfig, os; print('' if os.path.exists(sysconfig.get_path('include') + '/Python.h') else 'python3-dev')") \
    && apt-get install -y -q --no-install-recommends git tini gcc g++ libc6-dev $headers \
    && (apt-get install -y -q --no-install-recommends dataset-fashion-mnist || true) \
    && rm -rf /var/lib/apt/lists/* \
    && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED \
    && useradd --create-home --uid 1000 app
WORKDIR /workspace/resnet-padding

# 1. torch and torchvision, pinned: the largest layer, rebuilt only when the versions change.
RUN python -m pip install --no-cache-dir "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}"
# 2. every other dependency and the build backend, read from pyproject.toml alone: rebuilt only
#    when it changes.
COPY pyproject.toml ./
RUN python -c "import tomllib; t = tomllib.load(open('pyproject.toml', 'rb')); p = t['project']; \
print('\n'.join(t['build-system']['requires'] + p['dependencies'] + p['optional-dependencies']['test'] \
+ p['optional-dependencies']['dashboard']))" \
        > /tmp/requirements.txt \
    && python -m pip install --no-cache-dir -r /tmp/requirements.txt \
        "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}" \
    && rm /tmp/requirements.txt
# 3. the checkout (.dockerignore leaves out what git ignores), then one layer that installs it
#    (--no-deps, and the backend from layer 2: it fetches nothing), checks the built-in data,
#    makes the folders runs write to, and hands the tree to the user: a named volume mounted on
#    outputs/ or results/ starts as app's, so it is writable without a chown.
COPY . ./
RUN python -m pip install --no-cache-dir --no-deps --no-build-isolation -e ".[test,dashboard]" \
    && FASHION_MNIST_ROOT=/usr/share/datasets/fashion-mnist bash scripts/get_data.sh python \
    && mkdir -p outputs results wandb \
    && chown -R app:app /workspace/resnet-padding \
    && chmod 1777 /home/app

# docker run --user $(id -u):$(id -g), to write a host folder as its owner, runs as a uid with no
# account here: HOME stays app's, open to every uid, for the caches of torch, Triton, matplotlib
# and wandb (docker would give such a uid HOME=/, which it cannot write).
ENV HOME=/home/app

USER app
ENTRYPOINT ["/usr/bin/tini", "--"]
# python train.py: the demo's recipe on its full schedule (README); resnet-demo is the
# demo's three models and tables.
CMD ["python", "train.py"]
