"""Results, from the rows a run writes to what a person reads: the results file (:mod:`.rows`), its tables
(:mod:`.tables`, written as files by :mod:`.table_files`) and charts (:mod:`.charts`) beside the published
numbers (:mod:`.published`), the summary every run prints (:mod:`.console`), and W&B (:mod:`.wandb_log`).
"""
