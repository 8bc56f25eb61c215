"""``topics backup [--url URL] FILE`` and ``topics restore FILE DATA_DIR [--force]``.

``backup`` downloads ``GET /v0/backup`` (an admin key) through ``Client.backup``: FILE is
written as ``FILE.tmp`` and renamed once whole; ``-`` streams the archive to stdout.
``restore`` works offline, on the disk: no server, and the target's lock is taken
(``topics/_persistence/restore.py`` says what it checks). Messages go to stderr when
stdout carries the archive; ``--json`` prints the result as one JSON object.
"""

from __future__ import annotations

import sys

from topics._persistence.restore import RestoreError, restore
from topics.cli.session import EXIT_ERROR, Session

__all__ = ["backup_cmd", "restore_cmd"]


def backup_cmd(cli: Session) -> None:
    file: str = cli.args.file
    if file == "-":
        sys.stdout.flush()
        size = cli.client.backup(sys.stdout.buffer)
        sys.stdout.buffer.flush()
        cli.err.write(f"topics: backup of {size} bytes written to stdout\n")
        return
    size = cli.client.backup(file)
    if cli.json:
        cli.emit({"file": file, "bytes": size})
    else:
        cli.out.write(f"saved a backup of {size} bytes to {file}\n")


def restore_cmd(cli: Session) -> int | None:
    a = cli.args
    try:
        result = restore(a.file, a.data_dir, force=a.force)
    except RestoreError as exc:
        cli.err.write(f"topics: error: {exc}\n")
        return EXIT_ERROR
    info = result.info
    if cli.json:
        cli.emit(
            {
                "data_dir": a.data_dir,
                "files": result.files,
                "bytes": result.bytes,
                "topics": result.topics,
                "last_lsn": info.get("last_lsn"),
                "created_ms": info.get("created_ms"),
            }
        )
    else:
        cli.out.write(
            f"restored {result.files} files ({result.bytes} bytes, {result.topics} topics, "
            f"up to LSN {info.get('last_lsn')}) into {a.data_dir}\n"
        )
    return None
