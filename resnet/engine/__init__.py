"""Training and evaluation machinery used by train.py and eval.py (one job per module)."""
