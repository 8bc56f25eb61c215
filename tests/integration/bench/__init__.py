"""Smoke tests of the benchmark tooling that start processes: the runner running
benchmarks, the watch benchmark's floor server. bench/ goes on ``sys.path`` here, before
any test module imports a bench module by its bare name."""

import tests.support.bench  # noqa: F401
