"""The resume table of docs/training.md, generated from the declaration of every key
(``KEYS`` of resnet/schema.py): run after adding a key or changing its rule or line.

    python scripts/resume_table.py          # rewrite the table in docs/training.md
    python scripts/resume_table.py --print  # print it

``tests/engine/test_resume_rules.py`` checks that the committed table is the generated one.
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's resnet/, not another one installed

from resnet.schema import resume_table, with_resume_table  # noqa: E402


def main() -> None:
    if sys.argv[1:] == ["--print"]:
        sys.stdout.write(resume_table())
        return
    doc = REPO / "docs" / "training.md"
    doc.write_text(with_resume_table(doc.read_text()))
    print(f"wrote the resume table of {doc}")


if __name__ == "__main__":
    main()
