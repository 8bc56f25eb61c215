"""The HTTP frontend (contract /v0 over hypercorn + quart-trio).

``create_app(engine, settings)`` builds the ASGI app; ``frontends/server.py`` serves it.
See docs/HTTP.md for how it is built and why.
"""

from __future__ import annotations

from .app import ROUTE_MODULES as ROUTE_MODULES
from .app import TopicsHttpApp as TopicsHttpApp
from .app import create_app as create_app
from .state import HttpSettings as HttpSettings

__all__ = ["ROUTE_MODULES", "HttpSettings", "TopicsHttpApp", "create_app"]
