"""Code the tests share; test modules import from here, never from each other or conftest.

builtin_data: the built-in Fashion-MNIST must be there (a missing one fails with the install command)
compose: the project's real configs, composed as train.py and eval.py compose them
evaluation: eval.py's body in this process, and the overrides of an evaluation on a folder
faults: the fault-injecting train.py wrapper, launching with a fault, and checking how a run ended
imagegen: generated photo-like images, JPEG folders and the tiny 3-class ImageFolder
models: tiny models (and a checkpoint of one) with random statistics
standins: random-weight stand-ins for published files (docs/evaluation.md's seed-table recipe makes them)
procs: the tests' subprocesses, each in its own process group, killed whole past its deadline
training: small training runs in this process or as SLURM tasks, and reading what they wrote
weights: inputs and random-valued weight files in each source's own layout (Keras HDF5, fb.resnet.torch, TensorNets)
"""
