"""Training (``train.py``), one line per module:

* :mod:`.run`: the body of ``train.py``: build everything from the config, train, checkpoint, report;
* :mod:`.checks`: the checks of a training config that need no data and no device;
* :mod:`.optim`: the optimizer and the per-step LR schedule (the optim/ and sched/ groups);
* :mod:`.losses`: the training loss and the batch augmentation on the device, as the config names them;
* :mod:`.mixup`: timm's Mixup / CutMix for batches of any size, odd ones too;
* :mod:`.sync_bn`: ``sync_bn=true``, batch statistics over every process's batch, on any device;
* :mod:`.loop`: one epoch, DDP-aware and resumable mid-epoch;
* :mod:`.totals`: an epoch's totals by name, summed in one all-reduce, and the train metrics made from them;
* :mod:`.state`: seeding and RNG snapshots (plain data, for the checkpoint);
* :mod:`.checkpointer`: ``last.pt``, written by rank 0 for every rank, and what is intact when a write fails;
* :mod:`.resume`: where a run starts: from scratch, or from a checkpoint whose state fits this run;
* :mod:`.resume_rules`: what a resumed run may change, by each key's rule (:data:`resnet.schema.KEYS`);
* :mod:`.latest_run`: ``resume=true`` without a run dir, the unfinished run of this config under ``outputs/``;
* :mod:`.lock`: one run at a time in a run dir (a ``flock`` on ``<run dir>/.lock``);
* :mod:`.preempt`: a stop signal -> save at the next step boundary -> requeue;
* :mod:`.peers`: another process of the job stalled or died: which one, where, at which step, in one line;
* :mod:`.ending`: how a run ends: its fit, a stop handed over to SLURM or submitit, a finished run found again;
* :mod:`.runlog`: rank 0's outputs: CSV logs, results.json, the summary table, train.log, W&B.

What a checkpoint holds, and which one a run resumes from: :mod:`resnet.checkpoint`. Validation is
:mod:`resnet.evaluation.loop`, shared with ``eval.py``. Imports point one way: the engine uses
:mod:`resnet.evaluation`, never the reverse."""
