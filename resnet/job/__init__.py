"""A training job's life cycle, apart from the training itself, one line per module:

* :mod:`.signals`: stop signals, caught from train.py's first instruction (standard library only:
  importing this package must not import torch);
* :mod:`.preempt`: a stop signal -> save at the next step boundary -> requeue;
* :mod:`.checkpointer`: ``last.pt``, written by rank 0 for every rank, and what is intact when a write fails;
* :mod:`.resume`: where a run starts: from scratch, or from a checkpoint whose state fits this run;
* :mod:`.resume_rules`: what a resumed run may change, by each key's rule (:data:`resnet.schema.KEYS`);
* :mod:`.latest_run`: ``resume=true`` without a run dir, the unfinished run of this config under ``outputs/``;
* :mod:`.lock`: one run at a time in a run dir (a ``flock`` on ``<run dir>/.lock``);
* :mod:`.peers`: another process of the job stalled or died: which one, where, at which step, in one line;
* :mod:`.ending`: how a run ends: its fit, a stop handed over to SLURM or submitit, a finished run found again.

The training itself (the epochs, the step, the optimizer) is :mod:`resnet.engine`; what a
checkpoint file holds is :mod:`resnet.checkpoint`.
"""
