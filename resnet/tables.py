"""``python -m resnet.tables``, kept for old scripts: the command is resnet/cli/tables.py (``resnet-tables``)."""

from resnet.cli.tables import main

if __name__ == "__main__":
    main()
