"""``python -m topics.cli``: the ``topics`` command, as the console script runs it."""

import sys

from . import main

sys.exit(main())
