"""``python -m resnet.dashboard``, kept for old scripts: the command is resnet/cli/dashboard.py
(``resnet-dashboard``)."""

from resnet.cli.dashboard import main

if __name__ == "__main__":
    main()
