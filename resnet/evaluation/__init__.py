"""Evaluation of trained and published weights under any padding scheme (``eval.py``).

* :mod:`.sources`: ``weights=`` values, parsed and loaded with their native padding;
* :mod:`.hub`: where published weights live on disk, fetched only when asked;
* :mod:`.loader`: the evaluation split, sharded over processes, images resized once;
* :mod:`.tencrop`: the single and 10-crop protocols, cut on the device;
* :mod:`.results`: the results file, one JSON row per evaluation;
* :mod:`.run`: the body of ``eval.py``.
"""
