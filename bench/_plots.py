"""PNG figures of a run (matplotlib, Agg backend: no display needed).

Each figure is drawn only when the run has numbers for it; ``draw_all`` returns the files
it wrote so the report embeds exactly those.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: headless machines have no display

import _numbers as nb
import matplotlib.pyplot as plt
from _numbers import Results
from matplotlib.ticker import FuncFormatter

COLORS = {"topics": "#1f77b4", "Redis": "#d62728", "NATS": "#2ca02c"}
WATCH_COLORS = dict(zip(nb.WATCH_SYSTEMS, COLORS.values(), strict=True))
DPI = 110


def _fmt(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f} M"
    if value >= 1e3:
        return f"{value / 1e3:.0f} k"
    return f"{value:.0f}"


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def rate_bars(rates: list[nb.Rate], title: str, path: Path) -> Path | None:
    """Horizontal bars on a log axis: in-process and HTTP rates differ by 10-100x."""
    shown = [r for r in rates if r.value]
    if not shown:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.7 * len(shown) + 1.4))
    labels = [textwrap.fill(f"{r.system}: {r.label}", 48) for r in shown]
    values = [float(r.value or 0) for r in shown]
    bars = ax.barh(labels, values, color=[COLORS.get(r.system, "grey") for r in shown])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel(shown[0].unit + " (log scale)")
    ax.set_title(title)
    for bar, value in zip(bars, values, strict=True):
        ax.text(value, bar.get_y() + bar.get_height() / 2, " " + _fmt(value), va="center",
                fontsize=8)  # fmt: skip
    ax.set_xlim(right=max(values) * 4)
    ax.tick_params(axis="y", labelsize=8)
    return _save(fig, path)


def watch_latency(results: Results, path: Path) -> Path | None:
    series = nb.watch_series(results)
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.8))
    drawn = False
    for system in nb.WATCH_SYSTEMS:
        for pct, style in (("p50_ms", "-o"), ("p99_ms", "--s")):
            points = [
                (n, getattr(lat, pct))
                for n, systems in series.items()
                if (lat := systems.get(system)) is not None and getattr(lat, pct) is not None
            ]
            if not points:
                continue
            drawn = True
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, style, color=WATCH_COLORS[system], label=f"{system} {pct[:3]}")
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("watchers of one topic (log)")
    ax.set_ylabel("write -> deliver latency, ms (log)")
    ax.set_title("Live delivery latency vs watcher count")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def queue_bars(results: Results, path: Path) -> Path | None:
    rows = [r for r in nb.queue_rows(results) if r.pipeline_jobs_s or r.drain_jobs_s]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(9, 0.7 * len(rows) + 1.4))
    height = 0.38
    ys = range(len(rows))
    for offset, phase, alpha in ((-height / 2, "pipeline", 1.0), (height / 2, "drain", 0.55)):
        values = [getattr(r, f"{phase}_jobs_s") or 0.0 for r in rows]
        bars = ax.barh([y + offset for y in ys], values, height,
                       color=[COLORS.get(r.system, "grey") for r in rows], alpha=alpha,
                       label="produce while consuming" if phase == "pipeline" else "drain a backlog")  # fmt: skip
        for bar, value in zip(bars, values, strict=True):
            if value:
                ax.text(value, bar.get_y() + bar.get_height() / 2, " " + _fmt(value),
                        va="center", fontsize=7)  # fmt: skip
    ax.set_yticks(list(ys), [textwrap.fill(r.setup, 40) for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("jobs/s (log scale; dark: produce while consuming, light: drain)")
    ax.set_title("Job queues: produce -> claim -> ack")
    return _save(fig, path)


def persistence_bars(results: Results, path: Path) -> Path | None:
    rows = nb.persistence_rows(results)
    if not rows:
        return None
    classes = list(dict.fromkeys(str(r["durability"]) for r in rows))
    writers = sorted({int(r["writers"]) for r in rows})
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / max(1, len(writers))
    for i, w in enumerate(writers):
        values = [nb.persistence_rate(results, c, w) or 0.0 for c in classes]
        xs = [k + (i - (len(writers) - 1) / 2) * width for k in range(len(classes))]
        bars = ax.bar(xs, values, width, label=f"{w} writer{'s' if w > 1 else ''}")
        for bar, value in zip(bars, values, strict=True):
            if value:
                ax.text(bar.get_x() + bar.get_width() / 2, value, _fmt(value), ha="center",
                        va="bottom", fontsize=7)  # fmt: skip
    ax.set_xticks(range(len(classes)), classes)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt(v)))
    ax.set_ylabel("records/s (batches of 100 x 64 B)")
    ax.set_title("Embedded append by durability class and concurrent writers")
    ax.legend(fontsize=8)
    return _save(fig, path)


def draw_all(results: Results, outdir: Path) -> dict[str, Path]:
    """Every figure the run has numbers for: name -> file written."""
    figures = {
        "writes": rate_bars(nb.write_rates(results), "Writes: topics vs Redis Streams vs NATS JetStream",
                            outdir / "writes.png"),
        "reads": rate_bars(nb.read_rates(results), "Reads of 1000-record windows: topics vs peers",
                           outdir / "reads.png"),
        "watch": watch_latency(results, outdir / "watch_latency.png"),
        "queues": queue_bars(results, outdir / "queues.png"),
        "persistence": persistence_bars(results, outdir / "persistence.png"),
    }  # fmt: skip
    return {name: path for name, path in figures.items() if path is not None}
