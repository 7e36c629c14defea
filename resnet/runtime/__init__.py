"""The process and the machine it runs on, for training and evaluation alike, one line per module:

* :mod:`.distributed`: who launched this process (torchrun, SLURM, submitit, alone), its rank and
  device, the process group and its collectives;
* :mod:`.device`: where and how tensors run: the device, autocast, joining the job's processes;
* :mod:`.cpus`: the CPUs this process may use, in and out of containers;
* :mod:`.workers`: how a run spends them: its threads and its loader workers;
* :mod:`.container`: whether this process runs in a container, and whether a folder outlives it.

Nothing here knows about models, data or training; :mod:`resnet.engine` and
:mod:`resnet.evaluation` build on it.
"""
