"""The built-in data must be there: a missing Fashion-MNIST fails the test with the command
that installs it, never a silent skip."""

from __future__ import annotations

import pytest

from data.fashion_mnist import find_root


def require_fashion_mnist() -> None:
    try:
        find_root()
    except FileNotFoundError as err:
        pytest.fail(f"Fashion-MNIST is not installed ({err}); install it with: bash scripts/get_data.sh", pytrace=False)
