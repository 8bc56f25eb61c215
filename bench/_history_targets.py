"""Issue 31's targets for bench/history.py, judged from its JSON, and its printed table.

Shared by history.py (which prints them and stores the verdicts in its JSON) and by the
page (bench/_report.py, bench/_targets.py), so the two never judge differently.

How each figure is read (the issue states the targets; these are the readings):
- "RSS within the cache budget + 64 MiB" is judged on the growth over an empty data
  directory's server at rest (the interpreter and its imports are not history).
- "ready in <= 2 s" is judged from spawning topics-server to its first 200 on /v0/ready;
  the empty directory's figure is printed beside it.
- "<= 2 s plus the WAL tail's replay" takes the tail's replay as its records over the
  load's write rate (replay does no more per record than the write did).
- "<= 1 byte per retained record beyond the cache": RSS at rest minus the empty server's
  RSS minus the cache's reported bytes (0 when the engine does not report them), over
  the records held.
- Spark path mode "not slower": against ``--baseline`` (an earlier run's JSON); 95 % of its
  rate counts as not slower on this machine; without one, not judged.
"""

from __future__ import annotations

from typing import Any

MIB = 1 << 20
COLD_INPROC_MIN = 0.50
COLD_HTTP_MIN = 0.80
SCAN_SLACK_BYTES = 64 * MIB
READY_MAX_S = 2.0
REST_BYTES_PER_RECORD_MAX = 1.0
NOT_SLOWER_MIN = 0.95


def _verdict(
    target: str, measured: float | None, limit: float, at_least: bool, text: str
) -> dict[str, Any]:
    met = None if measured is None else (measured >= limit if at_least else measured <= limit)
    return {
        "target": target,
        "measured": text if measured is not None else "not measured",
        "met": met,
    }


def judge(d: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target for every cache size of one run's results."""
    out: list[dict[str, Any]] = []
    empty_rss = d.get("empty_server", {}).get("rss_mib")
    write_rate = d.get("load", {}).get("records_s") or 0.0
    for c in d.get("caches", []):
        label = f"cache {c['cache_label']}"
        inproc = c.get("inproc", {}).get("cold_over_hot")
        http = c.get("http", {}).get("cold_over_hot")
        out.append(_verdict(f"{label}: diff 1000 over cold segments >= 50 % of hot, in-process",
                            inproc, COLD_INPROC_MIN, True, f"{(inproc or 0):.0%}"))  # fmt: skip
        out.append(_verdict(f"{label}: diff 1000 over cold segments >= 80 % of hot, HTTP",
                            http, COLD_HTTP_MIN, True, f"{(http or 0):.0%}"))  # fmt: skip
        peak = c.get("scan", {}).get("peak_rss_mib")
        growth = None if peak is None or empty_rss is None else peak - empty_rss
        budget = (c["cache_bytes"] + SCAN_SLACK_BYTES) / MIB
        out.append(_verdict(f"{label}: full scan keeps server RSS growth <= cache + 64 MiB",
                            None if growth is None else growth - budget, 0.0, False,
                            f"{(growth or 0):.0f} MiB over an empty server (budget {budget:.0f} MiB)"))  # fmt: skip
        ready = c.get("restart", {}).get("clean_ready_s")
        out.append(_verdict(f"{label}: ready <= 2 s after a clean shutdown", ready, READY_MAX_S,
                            False, f"{(ready or 0):.2f} s (empty dir "
                            f"{d.get('empty_server', {}).get('ready_s', 0):.2f} s)"))  # fmt: skip
        killed = c.get("restart", {}).get("kill_ready_s")
        tail = c.get("restart", {}).get("tail_records", 0)
        replay = tail / write_rate if write_rate else 0.0
        out.append(_verdict(f"{label}: ready <= 2 s + the WAL tail's replay after SIGKILL",
                            killed, READY_MAX_S + replay, False,
                            f"{(killed or 0):.2f} s (tail {tail} records, replay allowance {replay:.2f} s)"))  # fmt: skip
        per = c.get("rest", {}).get("bytes_per_record_beyond_cache")
        out.append(_verdict(f"{label}: at rest <= 1 byte per retained record beyond the cache",
                            per, REST_BYTES_PER_RECORD_MAX, False, f"{(per or 0):.2f} B"))  # fmt: skip
    for key, name in (("reader", "topics.Reader"), ("spark", "Spark path mode")):
        ratio = d.get("offline", {}).get(key, {}).get("over_baseline")
        out.append(_verdict(f"{name} full read not slower than --baseline (>= 95 %)", ratio,
                            NOT_SLOWER_MIN, True, f"{(ratio or 0):.0%} of the baseline's rate"))  # fmt: skip
    if not all(d.get("cache_knob", {}).values()):
        for v in out[:-2]:
            v["measured"] += " (cache size not honoured by this tree)"
    return out


def _n(x: Any, digits: int = 0) -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and digits:
        return f"{x:,.{digits}f}"
    return f"{x:,.0f}" if isinstance(x, (int, float)) else str(x)


def rows(d: dict[str, Any]) -> list[list[str]]:
    """The results table: one row per figure, one column per cache size."""
    caches = d.get("caches", [])

    def row(name: str, get: Any, digits: int = 0) -> list[str]:
        return [name, *(_n(get(c), digits) for c in caches)]

    return [
        row("ready after clean stop, s", lambda c: c["restart"].get("clean_ready_s"), 2),
        row("ready after SIGKILL (WAL tail), s", lambda c: c["restart"].get("kill_ready_s"), 2),
        row("RSS at rest, MiB", lambda c: c["rest"].get("rss_mib"), 1),
        row("at rest beyond cache, B/record", lambda c: c["rest"].get("bytes_per_record_beyond_cache"), 2),
        row("HTTP diff 1000 cold, records/s", lambda c: c["http"].get("cold_records_s")),
        row("HTTP diff 1000 hot, records/s", lambda c: c["http"].get("hot_records_s")),
        row("HTTP cold/hot", lambda c: c["http"].get("cold_over_hot"), 2),
        row("HTTP cold diff p50 / p99, ms", lambda c: f"{c['http']['cold_p50_ms']:.2f} / {c['http']['cold_p99_ms']:.2f}"),
        row("in-process diff 1000 cold, records/s", lambda c: c["inproc"].get("cold_records_s")),
        row("in-process diff 1000 hot, records/s", lambda c: c["inproc"].get("hot_records_s")),
        row("in-process cold/hot", lambda c: c["inproc"].get("cold_over_hot"), 2),
        row("in-process cold diff p50 / p99, ms", lambda c: f"{c['inproc']['cold_p50_ms']:.2f} / {c['inproc']['cold_p99_ms']:.2f}"),
        row("full scan over HTTP, records/s", lambda c: c["scan"].get("records_s")),
        row("full scan peak RSS, MiB", lambda c: c["scan"].get("peak_rss_mib"), 1),
        row("cache bytes at rest / after the scan", lambda c: " / ".join(
            _n(c.get(k, {}).get("metrics", {}).get("topics_cache_bytes")) for k in ("rest", "scan"))),
        row("cache hits / misses / evictions", lambda c: _cache_counts(c.get("scan", {}).get("metrics", {}))),
    ]  # fmt: skip


def _cache_counts(metrics: dict[str, Any]) -> str:
    names = ("topics_cache_hits_total", "topics_cache_misses_total", "topics_cache_evictions_total")
    if not any(n in metrics for n in names):
        return "not reported"
    return " / ".join(_n(metrics.get(n)) for n in names)


def render_table(d: dict[str, Any]) -> list[str]:
    """The results as a Markdown table (printed by the bench and shown on the page)."""
    head = ["figure", *(f"cache {c['cache_label']}" for c in d.get("caches", []))]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(d)]
    return lines


def section(d: dict[str, Any]) -> list[str]:
    """The page's paragraphs and table for one run's results (bench/_report.py adds the
    heading and the run it came from)."""
    load = d.get("load", {})
    disk = load.get("disk", {})
    empty = d.get("empty_server", {})
    n = load.get("records") or 0
    lines = [
        "The recorded run: `python bench/run_all.py --only history --no-setup` (200 M records, "
        "~20 GB of disk; its own 4 h timeout). Issue 31's targets, judged in the table of "
        "targets above (how each figure is read: bench/_history_targets.py): a diff of limit "
        "1000 over cold segments >= 50 % of the same diff over hot ones in-process and >= 80 % "
        "over HTTP; a full scan keeps server RSS within the cache budget + 64 MiB; ready <= 2 s "
        "after a clean shutdown and <= 2 s plus the WAL tail's replay after SIGKILL; at rest, "
        "beyond the cache, <= 1 byte per retained record; the Spark path mode not slower "
        "(against `--baseline`, a run of the tree before issue 31).",
        "",
        f"{n:,} records of {load.get('record_bytes')} B data in {load.get('topics')} `disk` "
        f"topics, segments sealed at {(d.get('segment_target_bytes') or 0) / MIB:g} MiB, loaded "
        f"in-process at {_n(load.get('records_s'))} records/s. On disk: "
        f"{disk.get('allocated', 0) / MIB:,.1f} MiB ({disk.get('allocated', 0) / max(n, 1):.1f} B "
        f"per record; segment files {disk.get('segment_bytes', 0) / MIB:,.1f} MiB in "
        f"{disk.get('segment_files')} files). An empty data directory's server: "
        f"{_n(empty.get('rss_mib'), 1)} MiB RSS, ready {_n(empty.get('ready_s'), 2)} s after spawn. "
        f"Cold reads with the page cache {'dropped' if d.get('page_cache') == 'drop' else 'kept'}.",
        "",
    ]
    if not all(d.get("cache_knob", {}).values()):
        lines += ["_This run's tree did not honour a cache size (issue 31 not in it): every "
                  "column measures the same all-in-memory engine._", ""]  # fmt: skip
    lines += [*render_table(d), ""]
    for key, name in (
        ("reader", "`topics.Reader` (path mode's reader)"),
        ("spark", "Spark path mode `count()`"),
    ):
        o = d.get("offline", {}).get(key, {})
        rate = f"{_n(o.get('records_s'))} records/s" if o.get("records_s") else o.get("note", "—")
        lines.append(f"- {name}, the whole directory: {rate}")
    return [*lines, ""]
