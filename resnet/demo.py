"""``python -m resnet.demo``, kept for old scripts: the command is resnet/cli/demo.py (``resnet-demo``)."""

from resnet.cli.demo import main

if __name__ == "__main__":
    main()
