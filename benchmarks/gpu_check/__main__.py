"""``python -m benchmarks.gpu_check``: :func:`benchmarks.gpu_check.driver.main`."""

import sys

from benchmarks.gpu_check.driver import main

sys.exit(main())
