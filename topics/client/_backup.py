"""``Client.backup`` and ``AsyncClient.backup``: download ``GET /v0/backup`` (an admin call) into a file.

Rules:
1. The body is streamed to the file in chunks: a backup the size of the data directory
   never sits in memory.
2. A path is written as ``<path>.tmp``, fsynced, then renamed: a file with the final
   name is always a whole archive (the server sends an exact Content-Length, and httpx
   raises when the connection ends before it); a failed download removes the temp file.
3. One attempt: a backup is not retried behind the caller's back (each one costs the
   server a checkpoint and a full read of the directory); errors are the answer's
   :mod:`topics.errors` class, or :class:`ClientConnectionError`.
"""

from __future__ import annotations

import contextlib
import os
from typing import BinaryIO

import anyio
import httpx

from ._transport import Settings, connection_error, error_from_response, new_request_id

__all__ = ["download_backup", "download_backup_async"]

_CHUNK = 1 << 20


def download_backup(http: httpx.Client, settings: Settings, dest: str | BinaryIO) -> int:
    """Save a backup of the server's data directory to ``dest`` (a path or a binary file);
    returns the archive's length in bytes."""
    if isinstance(dest, str):
        tmp = dest + ".tmp"
        try:
            with open(tmp, "wb") as out:
                size = download_backup(http, settings, out)
                _flush_and_sync(out)
            os.replace(tmp, dest)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
            raise
        return size
    request_id = new_request_id()
    headers = {"X-Request-ID": request_id, "Accept": "application/x-tar"}
    size = 0
    try:
        with http.stream("GET", "/v0/backup", headers=headers) as resp:
            if not resp.is_success:
                raise error_from_response(resp.status_code, resp.headers, resp.read())
            for chunk in resp.iter_bytes(_CHUNK):
                dest.write(chunk)
                size += len(chunk)
    except httpx.TransportError as exc:
        raise connection_error(exc, request_id, settings.base_url()) from exc
    return size


async def download_backup_async(
    http: httpx.AsyncClient, settings: Settings, dest: str | BinaryIO
) -> int:
    """:func:`download_backup` for the async client: the file is written in worker
    threads, so the event loop never waits on the disk."""
    if isinstance(dest, str):
        tmp = dest + ".tmp"
        try:
            out = await anyio.to_thread.run_sync(open, tmp, "wb")
            try:
                size = await download_backup_async(http, settings, out)
                await anyio.to_thread.run_sync(_flush_and_sync, out)
            finally:
                out.close()
            await anyio.to_thread.run_sync(os.replace, tmp, dest)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
            raise
        return size
    request_id = new_request_id()
    headers = {"X-Request-ID": request_id, "Accept": "application/x-tar"}
    size = 0
    try:
        async with http.stream("GET", "/v0/backup", headers=headers) as resp:
            if not resp.is_success:
                raise error_from_response(resp.status_code, resp.headers, await resp.aread())
            async for chunk in resp.aiter_bytes(_CHUNK):
                await anyio.to_thread.run_sync(dest.write, chunk)
                size += len(chunk)
    except httpx.TransportError as exc:
        raise connection_error(exc, request_id, settings.base_url()) from exc
    return size


def _flush_and_sync(out: BinaryIO) -> None:
    out.flush()
    os.fsync(out.fileno())
