"""``topics-server``: the engine served over HTTP by hypercorn, in one trio run.

Configuration comes from the environment (contract §0.2, §2, §11) and flags override it;
``topics-server --help`` lists every variable. The engine and the server share one trio
run, nested so that HTTP drains first and the engine closes (and checkpoints) last::

    async with open_engine(data_dir, wait_ready=False) as engine:
        await serve(create_app(engine, settings), config, shutdown_trigger=...)

``serve`` (``http/serve.py``) is hypercorn's trio worker with the fast lane in front
(``http/lane.py``; ``TOPICS_HTTP_LANE=0`` leaves it out).

Rules:
1. Refuse to start (exit 2, a loud message) on a malformed setting, on a malformed API key
   entry (fail closed), and on a non-loopback bind without keys unless
   ``TOPICS_ALLOW_INSECURE_NO_AUTH=1``. No keys on loopback is dev mode: allowed, with a
   loud warning.
2. The plaintext keys are hashed into the key store at once and removed from the process
   environment; they are never logged.
3. The server listens before recovery finishes (``wait_ready=False``) and answers
   ``503 not_ready`` until the engine is ready.
4. On startup, after binding, print ``topics-server listening on http://HOST:PORT`` (the
   real port, also when asked for port 0) and flush.
5. SIGTERM/SIGINT: /v0/ready turns 503 shutting_down, pending long-polls answer now, the
   listener closes, in-flight requests get ``TOPICS_DRAIN_TIMEOUT_MS`` to finish, then the
   engine closes; exit 0. A second signal stops waiting for the drain.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import trio
from hypercorn.config import Config as HypercornConfig

from topics import __version__
from topics._storage.fs import StorageCorruptionError
from topics._storage.manifest import ManifestCorruptionError
from topics.auth import KeyStore
from topics.engine import open_engine
from topics.settings import Limits

from .http import HttpSettings, create_app
from .http.connection import CLOSE_HANDSHAKE_TIMEOUT_S
from .http.serve import serve
from .http.state import HttpState

__all__ = ["ServerConfig", "load_config", "main"]

log = logging.getLogger("topics.server")

EXIT_CONFIG = 2

# name -> (default shown in --help, meaning)
ENV_VARS: dict[str, tuple[str, str]] = {
    "TOPICS_HOST": ("127.0.0.1", "bind address (non-loopback needs TOPICS_API_KEYS)"),
    "TOPICS_PORT": ("4000", "bind port (0 picks a free port; the real one is printed)"),
    "TOPICS_DATA_DIR": ("./data", "data directory; empty string = memory-only (like --memory)"),
    "TOPICS_API_KEYS": ("(none)", "comma-separated key[:scopes[:prefixes]] entries (§0.2)"),
    "TOPICS_PROBE_AUTH": ("0", "1 = /v0/health and /v0/ready require a key too"),
    "TOPICS_ALLOW_INSECURE_NO_AUTH": ("0", "1 = allow a non-loopback bind without keys"),
    "TOPICS_THROTTLE_LAG_MS": ("200", "shed load (429) above this trio scheduling lag; 0 = off"),
    "TOPICS_DRAIN_TIMEOUT_MS": ("10000", "how long in-flight requests may finish on shutdown"),
    "TOPICS_LOG_LEVEL": ("INFO", "logging level"),
    "TOPICS_HTTP_LANE": ("1", "0 = serve every request through hypercorn (no fast lane)"),
    "TOPICS_SSE_DIRECT": ("1", "0 = lane streams send every frame through ASGI, not the socket"),
    "TOPICS_HTTP_KEEP_ALIVE_MS": ("5000", "idle connection: wait this long for a next request"),
    "TOPICS_HTTP_HEAD_TIMEOUT_MS": (
        "10000",
        "a request head must be whole this long after it began",
    ),
    "TOPICS_HTTP_BODY_TIMEOUT_MS": (
        "30000",
        "a request body must be whole this long after its head (408)",
    ),
    "TOPICS_WS_CLOSE_TIMEOUT_MS": (
        str(round(CLOSE_HANDSHAKE_TIMEOUT_S * 1000)),
        "a WebSocket client must answer the server's close frame this soon",
    ),
}

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


class ConfigError(ValueError):
    """A setting that makes the server refuse to start (exit 2)."""


@dataclass(frozen=True)
class ServerConfig:
    host: str
    port: int
    data_dir: str | None
    http: HttpSettings
    limits: Limits
    drain_timeout_s: float
    log_level: str
    insecure_no_auth: bool
    http_lane: bool = True
    keep_alive_timeout_s: float = 5.0
    head_timeout_s: float = 10.0
    ws_close_timeout_s: float = CLOSE_HANDSHAKE_TIMEOUT_S


def _env_bool(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError(f"{name}={env[name]!r} is not a boolean (use 1/0, true/false)")


def _env_number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if value < 0:
        raise ConfigError(f"{name}={raw!r} must not be negative")
    return value


def _env_positive(env: Mapping[str, str], name: str, default: float) -> float:
    """A timeout: a number > 0 (a zero deadline would refuse every connection)."""
    value = _env_number(env, name, default)
    if value <= 0:
        raise ConfigError(f"{name}={env[name]!r} must be greater than 0")
    return value


def _help_epilog() -> str:
    rows = [
        f"  {name:<36} {default:<10} {meaning}" for name, (default, meaning) in ENV_VARS.items()
    ]
    limits = Limits()
    for field in limits.__dataclass_fields__:
        rows.append(f"  {Limits.env_var(field):<36} {getattr(limits, field)!s:<10} limit (§2/§11)")
    return "environment variables (flags override them):\n" + "\n".join(rows)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="topics-server",
        description="Serve a topics engine over HTTP (/v0).",
        epilog=_help_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", help="bind address (TOPICS_HOST)")
    parser.add_argument("--port", type=int, help="bind port, 0 = any free port (TOPICS_PORT)")
    parser.add_argument("--data-dir", help="data directory (TOPICS_DATA_DIR)")
    parser.add_argument("--memory", action="store_true", help="memory-only: no data directory")
    parser.add_argument(
        "--probe-auth", action="store_true", default=None, help="require keys on the probes"
    )
    parser.add_argument("--throttle-lag-ms", type=float, help="TOPICS_THROTTLE_LAG_MS")
    parser.add_argument("--drain-timeout-ms", type=float, help="TOPICS_DRAIN_TIMEOUT_MS")
    parser.add_argument("--log-level", help="TOPICS_LOG_LEVEL")
    parser.add_argument("--version", action="version", version=f"topics-server {__version__}")
    return parser


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost: assume it is reachable


def load_config(args: argparse.Namespace, env: Mapping[str, str]) -> ServerConfig:
    """Resolve flags over environment variables; raise ConfigError on anything invalid."""
    host = args.host or env.get("TOPICS_HOST", "").strip() or "127.0.0.1"
    port_raw = str(args.port) if args.port is not None else env.get("TOPICS_PORT", "4000").strip()
    if not port_raw.isdigit() or not 0 <= int(port_raw) <= 65535:
        raise ConfigError(f"port {port_raw!r} is not a port number (0-65535)")
    if args.memory:
        data_dir: str | None = None
    elif args.data_dir is not None:
        data_dir = args.data_dir or None
    else:
        data_dir = env.get("TOPICS_DATA_DIR", "./data") or None
    try:
        limits = Limits.from_env(env)
        keys = KeyStore.from_spec(env.get("TOPICS_API_KEYS"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    probe_auth = (
        args.probe_auth if args.probe_auth is not None else _env_bool(env, "TOPICS_PROBE_AUTH")
    )
    lag = args.throttle_lag_ms
    if lag is None:
        lag = _env_number(env, "TOPICS_THROTTLE_LAG_MS", 200.0)
    drain = args.drain_timeout_ms
    if drain is None:
        drain = _env_number(env, "TOPICS_DRAIN_TIMEOUT_MS", 10_000.0)
    keep_alive, head, body, ws_close = (
        _env_positive(env, name, float(ENV_VARS[name][0]))
        for name in (
            "TOPICS_HTTP_KEEP_ALIVE_MS",
            "TOPICS_HTTP_HEAD_TIMEOUT_MS",
            "TOPICS_HTTP_BODY_TIMEOUT_MS",
            "TOPICS_WS_CLOSE_TIMEOUT_MS",
        )
    )
    return ServerConfig(
        host=host,
        port=int(port_raw),
        data_dir=data_dir,
        http=HttpSettings(
            limits=limits,
            keys=keys,
            probe_auth=probe_auth,
            throttle_lag_ms=lag,
            body_timeout_s=body / 1000,
            sse_direct=_env_bool({"TOPICS_SSE_DIRECT": "1", **env}, "TOPICS_SSE_DIRECT"),
        ),
        limits=limits,
        drain_timeout_s=drain / 1000,
        log_level=(args.log_level or env.get("TOPICS_LOG_LEVEL", "") or "INFO").upper(),
        insecure_no_auth=_env_bool(env, "TOPICS_ALLOW_INSECURE_NO_AUTH"),
        http_lane=_env_bool({"TOPICS_HTTP_LANE": "1", **env}, "TOPICS_HTTP_LANE"),
        keep_alive_timeout_s=keep_alive / 1000,
        head_timeout_s=head / 1000,
        ws_close_timeout_s=ws_close / 1000,
    )


def _check_exposure(cfg: ServerConfig) -> None:
    """Rule 1: the no-auth refusal and the dev-mode warning."""
    if cfg.http.keys.enabled:
        log.info("auth enabled: %d API key(s) configured", len(cfg.http.keys))
        return
    if not _is_loopback(cfg.host):
        if not cfg.insecure_no_auth:
            raise ConfigError(
                f"REFUSING TO START: bind {cfg.host!r} is not loopback and TOPICS_API_KEYS is "
                "empty, which would expose an unauthenticated event store. Set TOPICS_API_KEYS, "
                "bind 127.0.0.1, or set TOPICS_ALLOW_INSECURE_NO_AUTH=1 on a trusted network."
            )
        log.warning(
            "!!! AUTH DISABLED on non-loopback bind %s (TOPICS_ALLOW_INSECURE_NO_AUTH=1): "
            "anyone who can reach this port can read and write every topic !!!",
            cfg.host,
        )
        return
    log.warning(
        "!!! AUTH DISABLED: TOPICS_API_KEYS is empty (dev mode, loopback only); every request "
        "has full access !!!"
    )


def _hypercorn_config(cfg: ServerConfig) -> HypercornConfig:
    config = HypercornConfig()
    host = f"[{cfg.host}]" if ":" in cfg.host and not cfg.host.startswith("[") else cfg.host
    config.bind = [f"{host}:{cfg.port}"]
    config.accesslog = None  # an access log would record query strings; never tokens
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = cfg.drain_timeout_s
    config.keep_alive_timeout = cfg.keep_alive_timeout_s
    config.include_server_header = False
    config.backlog = 1024
    return config


#: Young-generation threshold of the cyclic GC while serving (CPython's default is 700).
GC_GEN0_THRESHOLD = 50_000


def _tune_gc() -> None:
    """Make the cyclic garbage collector cheaper per request, once start-up is done.

    Every request allocates a few hundred short-lived containers (ASGI messages, h11
    events, trio bookkeeping) of which a handful, still in flight across an await, survive
    each young collection: at the default threshold that is a collection every few
    requests, each walking those survivors and promoting them. Freezing what start-up
    built (modules, routes, the Quart app; it lives as long as the process) keeps it out
    of every later full collection, and the higher threshold lets the in-flight objects
    die before a collection sees them. Cycles are still collected, only in larger steps.
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, max(gen1, 50), max(gen2, 100))


async def _watch_signals(
    app_state: HttpState,
    stop: trio.Event,
    serving: trio.CancelScope,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            name = signal.Signals(signum).name
            if not stop.is_set():
                log.info("%s: draining (ready -> 503 shutting_down)", name)
                app_state.begin_shutdown()
                stop.set()
            else:
                log.warning("%s again: not waiting for in-flight requests", name)
                serving.cancel()


async def serve_forever(cfg: ServerConfig, listening: trio.Event | None = None) -> None:
    """Open the engine, serve HTTP until a signal, drain, close the engine (rule 5).

    ``listening`` is set once the server listens (so a later failure is not reported as
    a failure to start)."""
    async with open_engine(cfg.data_dir, limits=cfg.limits, wait_ready=False) as engine:
        app = create_app(engine, cfg.http)
        _tune_gc()
        stop = trio.Event()
        serving = trio.CancelScope()
        async with trio.open_nursery() as nursery:
            await nursery.start(_watch_signals, app.state, stop, serving)

            async def run_http(task_status: trio.TaskStatus[list[str]]) -> None:
                with serving:
                    await serve(
                        app,
                        _hypercorn_config(cfg),
                        lane=cfg.http_lane,
                        head_timeout=cfg.head_timeout_s,
                        close_timeout=cfg.ws_close_timeout_s,
                        shutdown_trigger=stop.wait,
                        task_status=task_status,
                    )
                nursery.cancel_scope.cancel()  # served and drained: stop watching signals

            binds = await nursery.start(run_http)
            where = binds[0] if binds else f"http://{cfg.host}:{cfg.port}"
            print(f"topics-server listening on {where}", flush=True)
            if listening is not None:
                listening.set()
            storage = cfg.data_dir if cfg.data_dir is not None else "memory-only"
            log.info("topics %s serving %s (storage: %s)", __version__, where, storage)
        log.info("HTTP drained; closing the engine")
    log.info("engine closed; bye")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``topics-server`` console script. Returns the exit code."""
    args = _parser().parse_args(argv)
    env = dict(os.environ)
    level = (args.log_level or env.get("TOPICS_LOG_LEVEL", "") or "INFO").upper()
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        cfg = load_config(args, env)
        _check_exposure(cfg)
    except ConfigError as exc:
        print(f"topics-server: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    finally:
        # Rule 2: the plaintext keys do not outlive parsing.
        os.environ.pop("TOPICS_API_KEYS", None)
        env.pop("TOPICS_API_KEYS", None)
    listening = trio.Event()
    try:
        trio.run(serve_forever, cfg, listening)
    except* OSError as group:
        # Before listening: a port in use, a locked or unwritable data directory. After:
        # storage that failed under the running engine (its own log lines say more).
        what = "stopped" if listening.is_set() else "cannot start"
        for err in group.exceptions:
            print(f"topics-server: {what}: {err}", file=sys.stderr, flush=True)
        sys.exit(1)
    except* StorageCorruptionError as refused:
        # Recovery refused a file before changing anything: one line that says which file,
        # why, and what to do, not a traceback.
        for bad in refused.exceptions:
            if isinstance(bad, ManifestCorruptionError):  # its message says what to do
                newer = "unsupported format version" in str(bad)
                print(
                    f"topics-server: cannot open the data directory {cfg.data_dir}: {bad}. "
                    "Nothing in it was changed."
                    + (' See docs/OPERATIONS.md, "Upgrades and rollbacks".' if newer else ""),
                    file=sys.stderr,
                    flush=True,
                )
                continue
            print(
                f"topics-server: cannot open the data directory {cfg.data_dir}: {bad}. "
                "Nothing in it was changed. A newer format version means a newer release "
                'wrote it (docs/OPERATIONS.md, "Upgrades and rollbacks"); a damaged file '
                "means restoring it from a backup.",
                file=sys.stderr,
                flush=True,
            )
        sys.exit(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
