"""Training (``train.py``): run.py is its body; loop.py one epoch; optim.py, state.py (resume),
runlog.py (CSV / W&B). Validation is :mod:`resnet.evaluation.loop`, shared with ``eval.py``."""
