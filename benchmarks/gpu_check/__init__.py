"""The GPU check (``bash scripts/gpu_check.sh``, ``python -m benchmarks.gpu_check --help``), one
module a step, in the order they run:

* :mod:`.environment`: torch, torchvision, CUDA, cuDNN, the device, ``nvidia-smi -L``, CPU cores;
* :mod:`.parity`: nvJPEG crops against the CPU path's, part by part, and the decode's images/s;
* :mod:`.race`: the decode under a concurrent backward, and torchvision #9606's probe (docs/gpu.md);
* :mod:`.train`: a short ``train.py +experiment=tv_v1`` in its own process, and the logged run of a command;
* :mod:`.eval`: ``eval.py`` on that run's ``last.pt``;
* :mod:`.benchmark`: ``python -m benchmarks.gpu`` in this process.

And what they share: :mod:`.driver` (the command line and the loop over the steps, ``__main__``
runs it), :mod:`.plan` (how big each step is, for a device and ``--quick``), :mod:`.check` (one
run: its folders, each step's result, report.json and summary.md).
"""
