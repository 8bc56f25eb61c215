"""The benchmark report, targets and plots, rendered from a fixture results file. bench/
goes on ``sys.path`` here, before any test module imports a bench module by its bare
name."""

import tests.support.bench  # noqa: F401
