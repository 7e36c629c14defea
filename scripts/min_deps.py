"""The lowest versions pyproject.toml allows, as pip constraints: each ``name>=X`` of the project's
dependencies becomes ``name==X``. ``bash scripts/test.sh --min-deps`` installs with them, so the
lower bounds are versions the suite has passed with, not guesses.

    python scripts/min_deps.py > constraints.txt
"""

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def lowest(requirement: str) -> str | None:
    """``torch>=2.4`` -> ``torch==2.4``; a requirement without a lower bound -> None."""
    name_and_bound, _, marker = requirement.partition(";")
    match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*>=\s*([\w.]+)\s*", name_and_bound)
    if match is None:
        return None
    return f"{match[1]}=={match[2]}" + (f"; {marker.strip()}" if marker else "")


def main() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    pins = [pin for requirement in project["dependencies"] if (pin := lowest(requirement))]
    sys.stdout.write("".join(f"{pin}\n" for pin in pins))


if __name__ == "__main__":
    main()
