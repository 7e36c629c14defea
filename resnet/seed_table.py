"""``python -m resnet.seed_table``, kept for old scripts: the command is resnet/cli/seed_table.py
(``resnet-seed-table``)."""

from resnet.cli.seed_table import main

if __name__ == "__main__":
    main()
