"""Training (``train.py``): run.py is its body; loop.py one epoch (resumable mid-epoch); optim.py;
state.py (resume); preempt.py (stop signal -> save -> requeue); lock.py (the run dir's lock);
mixup.py, sync_bn.py; runlog.py (CSV / W&B). Validation is :mod:`resnet.evaluation.loop`, shared
with ``eval.py``. Imports point one way: the engine uses :mod:`resnet.evaluation`, never the
reverse."""
