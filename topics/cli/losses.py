"""What the ``topics`` command line remembers between runs in one terminal session: the
topics whose evicted history it has told already, so ``topics read capped`` does not repeat
the same LOSS line on every run (issue 34).

Rules:
1. A tombstone whose gap starts at seq 1 met a reader that started at the beginning (``read``
   without ``--from``, ``--from 0``, ``tail --from 0``): nothing it had was lost, the topic's
   history just starts later. That is told once per terminal session, server and topic. A
   gap after a position the reader had (``--from 5``, a group's cursor) is a loss, and it is
   told every time.
2. The session is the terminal's (``os.getsid``): a new terminal, or a script in a session of
   its own (cron, systemd), is told again. The memory is a small JSON list in
   ``$XDG_RUNTIME_DIR/topics`` (per user, gone at logout), else in a directory under the
   system temp dir that only its owner can use; when neither works, everything is told.
3. Only the line on stderr is remembered away: ``--json``'s ``{"tombstone": …}`` line is
   data, printed every time (topics/cli.py rule 2).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

__all__ = ["ToldLosses"]


def _directory() -> Path | None:
    runtime = os.environ.get("XDG_RUNTIME_DIR", "").strip()
    base = Path(runtime) / "topics" if runtime else Path(tempfile.gettempdir())
    if not runtime:
        base /= f"topics-{os.getuid()}"
    try:
        base.mkdir(mode=0o700, parents=bool(runtime), exist_ok=True)
        st = base.stat()
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None  # someone else's, or open to them: remember nothing rather than trust it
    return base


class ToldLosses:
    """The from-the-start losses this terminal session was told (rules 1, 2), per server."""

    def __init__(self, url: str) -> None:
        self.url = url

    def first_time(self, topic: str) -> bool:
        """True if this session was not told ``topic``'s evicted history yet; remembers it."""
        where = _directory()
        if where is None:
            return True
        path = where / f"told-{os.getsid(0)}.json"
        key = f"{self.url} {topic}"
        try:
            told = json.loads(path.read_text())
        except (OSError, ValueError):
            told = []  # none yet, or torn by a concurrent run: at worst told twice
        if not isinstance(told, list):
            told = []
        if key in told:
            return False
        told.append(key)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:  # a rename, so a run reading it meanwhile sees the old list or the new one
            tmp.write_text(json.dumps(told))
            os.replace(tmp, path)
        except OSError:
            pass  # told now, and maybe again next time
        return True
