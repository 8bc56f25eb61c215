"""``python -m topics.frontends.http.openapi``: print the document of the app's routes."""

from __future__ import annotations

import sys

from ..app import ROUTE_MODULES
from .builder import document_text


def main() -> int:
    """Write the document of every route of :data:`..app.ROUTE_MODULES` to stdout."""
    sys.stdout.write(document_text(route for module in ROUTE_MODULES for route in module.ROUTES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
