"""topics: a persistent event engine — append-only topics with exact cursors.

The public surface: the async :class:`Engine` (also ``AsyncEngine``) opened with
:func:`open_engine`, the synchronous facade :func:`open`, configuration and result
types, and every error class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._clock import Clock as Clock
from ._clock import ManualClock as ManualClock
from ._clock import SystemClock as SystemClock
from ._storage.fs import DataDirLockedError as DataDirLockedError
from .config import TopicConfig as TopicConfig
from .consumer import consume as consume
from .cursor_types import ConsumeStats as ConsumeStats
from .cursor_types import CursorInfo as CursorInfo
from .cursor_types import DeleteCursorResult as DeleteCursorResult
from .engine import Engine as Engine
from .engine import open_engine as open_engine
from .errors import *  # noqa: F403 - the error classes are public by design
from .errors import __all__ as _errors_all
from .frontends.inproc import SyncEngine as SyncEngine
from .frontends.inproc import open as open
from .queue_types import AckResult as AckResult
from .queue_types import ClaimResult as ClaimResult
from .queue_types import ExtendResult as ExtendResult
from .queue_types import Job as Job
from .queue_types import NackResult as NackResult
from .queue_types import RedriveResult as RedriveResult
from .reader import Reader as Reader
from .router_types import DeleteRouterResult as DeleteRouterResult
from .router_types import PutRouterResult as PutRouterResult
from .router_types import RouterConfig as RouterConfig
from .router_types import RouterInfo as RouterInfo
from .router_types import RouterPage as RouterPage
from .router_types import RouterSummary as RouterSummary
from .settings import Limits as Limits
from .types import DeleteRecordsResult as DeleteRecordsResult
from .types import DeleteTopicResult as DeleteTopicResult
from .types import DiffResult as DiffResult
from .types import PutTopicResult as PutTopicResult
from .types import Record as Record
from .types import Tombstone as Tombstone
from .types import TopicPage as TopicPage
from .types import TopicState as TopicState
from .types import TopicSummary as TopicSummary
from .types import WriteResult as WriteResult
from .worker import Worker as Worker
from .worker import WorkerStats as WorkerStats
from .worker import run_worker as run_worker

if TYPE_CHECKING:
    from .client import AsyncClient as AsyncClient
    from .client import Client as Client

AsyncEngine = Engine


def __getattr__(name: str) -> Any:
    # The HTTP client pulls in httpx and wsproto (~100 ms); embedded users never pay for it.
    if name in ("Client", "AsyncClient"):
        from . import client

        return getattr(client, name)
    raise AttributeError(f"module 'topics' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "AckResult",
    "AsyncClient",
    "AsyncEngine",
    "ClaimResult",
    "Client",
    "Clock",
    "ConsumeStats",
    "CursorInfo",
    "DataDirLockedError",
    "DeleteCursorResult",
    "DeleteRecordsResult",
    "DeleteRouterResult",
    "DeleteTopicResult",
    "DiffResult",
    "Engine",
    "ExtendResult",
    "Job",
    "Limits",
    "ManualClock",
    "NackResult",
    "PutRouterResult",
    "PutTopicResult",
    "Reader",
    "Record",
    "RedriveResult",
    "RouterConfig",
    "RouterInfo",
    "RouterPage",
    "RouterSummary",
    "SyncEngine",
    "SystemClock",
    "Tombstone",
    "TopicConfig",
    "TopicPage",
    "TopicState",
    "TopicSummary",
    "Worker",
    "WorkerStats",
    "WriteResult",
    "__version__",
    "consume",
    "open",
    "open_engine",
    "run_worker",
    *_errors_all,
]
