"""Training (``train.py``): one main, one loop, its metrics, its optimizer; one line per module:

* :mod:`.run`: the body of ``train.py``: build everything from the typed config, train, checkpoint, report;
* :mod:`.loop`: one epoch, DDP-aware and resumable mid-epoch;
* :mod:`.totals`: an epoch's totals by name, summed in one all-reduce, and the train metrics made from them;
* :mod:`.optim`: the optimizer and the per-step LR schedule (the optim/ and sched/ groups);
* :mod:`.losses`: the training loss and the batch augmentation on the device, as the config names them;
* :mod:`.mixup`: timm's Mixup / CutMix for batches of any size, odd ones too;
* :mod:`.sync_bn`: ``sync_bn=true``, batch statistics over every process's batch, on any device;
* :mod:`.seeding`: seeding and RNG snapshots (plain data, for the checkpoint);
* :mod:`.train_config`: the config at the boundary: checked once, typed (:class:`~.train_config.TrainConfig`);
* :mod:`.runlog`: rank 0's outputs: CSV logs, results.json, the summary table, train.log, W&B.

The job's life cycle around the epochs (checkpoints, resume, locks, stop signals, lost peers, how
a run ends) is :mod:`resnet.job`; the process and its devices :mod:`resnet.runtime`. What a
checkpoint holds: :mod:`resnet.checkpoint`. Validation is :mod:`resnet.evaluation.loop`, shared
with ``eval.py``. Imports point one way: the engine uses :mod:`resnet.evaluation`, never the reverse."""
