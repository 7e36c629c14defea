"""Results, from the rows a run writes to what a person reads.

* :mod:`.rows`: the results file, one JSON row per evaluation (the one reader and writer);
* :mod:`.tables`: TensorNets-style tables and trained x evaluated matrices from rows;
  :mod:`.table_files`: both written as Markdown, CSV and PNG files;
* :mod:`.charts`: their charts; :mod:`.published`: the published numbers beside them;
* :mod:`.console`: the summary table every run prints; :mod:`.wandb_log`: W&B runs for train,
  eval and the seed table. (Bars on a terminal, plain lines in a log: :mod:`data.progress`, which
  the data tools use too.)
"""
