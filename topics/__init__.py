"""topics: a persistent event engine — append-only topics with exact cursors.

The public surface: the async :class:`Engine` (also ``AsyncEngine``) opened with
:func:`open_engine`, the synchronous facade :func:`open`, configuration and result
types, and every error class. The types and errors load with the package; the engine,
its facades, the Reader and the HTTP client load when first named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._clock import Clock as Clock
from ._clock import ManualClock as ManualClock
from ._clock import SystemClock as SystemClock
from ._storage.fs import DataDirLockedError as DataDirLockedError
from ._version import __version__ as __version__
from .config import TopicConfig as TopicConfig
from .cursor_types import ConsumeStats as ConsumeStats
from .cursor_types import CursorInfo as CursorInfo
from .cursor_types import DeleteCursorResult as DeleteCursorResult
from .errors import *  # noqa: F403 - the error classes are public by design
from .errors import __all__ as _errors_all
from .queue_types import AckResult as AckResult
from .queue_types import ClaimResult as ClaimResult
from .queue_types import ExtendResult as ExtendResult
from .queue_types import Job as Job
from .queue_types import NackResult as NackResult
from .queue_types import RedriveResult as RedriveResult
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

if TYPE_CHECKING:
    from .client import AsyncClient as AsyncClient
    from .client import Client as Client
    from .consumer import consume as consume
    from .engine import Engine as AsyncEngine
    from .engine import Engine as Engine
    from .engine import open_engine as open_engine
    from .frontends.inproc import SyncEngine as SyncEngine
    from .frontends.inproc import open as open
    from .reader import Reader as Reader
    from .worker import Worker as Worker
    from .worker import WorkerStats as WorkerStats
    from .worker import run_worker as run_worker


def __getattr__(name: str) -> Any:
    # The engine, its facades and the Reader bring in trio and the storage and subsystem
    # modules (~0.2 s), the HTTP client httpx and wsproto (~0.1 s). They load on first
    # use, so a process that needs only the types and errors, such as the one Spark starts
    # for every streaming query to plan it, never pays for them.
    module: Any
    if name in ("Engine", "AsyncEngine", "open_engine"):
        from . import engine as module
    elif name in ("SyncEngine", "open"):
        from .frontends import inproc as module
    elif name == "Reader":
        from . import reader as module
    elif name in ("Worker", "WorkerStats", "run_worker"):
        from . import worker as module
    elif name == "consume":
        from . import consumer as module
    elif name in ("Client", "AsyncClient"):
        from . import client as module
    else:
        raise AttributeError(f"module 'topics' has no attribute {name!r}")
    value = getattr(module, "Engine" if name == "AsyncEngine" else name)
    globals()[name] = value  # later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
