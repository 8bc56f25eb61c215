"""The ASGI shapes the HTTP frontend passes around, named once.

The dispatcher, the lane, the streams and the routes all speak raw ASGI (a scope, the
messages, ``send`` and ``receive``); these aliases say so in their signatures.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["Message", "Receive", "Scope", "Send"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message]]
