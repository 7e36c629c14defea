"""Code the tests share; test modules import from here, never from each other or conftest.

builtin_data: the built-in Fashion-MNIST must be there (a missing one fails with the install command)
compose: the project's real configs, composed as train.py and eval.py compose them
imagegen: generated photo-like images and JPEG folders
procs: the tests' subprocesses, each in its own process group, killed whole past its deadline
"""
