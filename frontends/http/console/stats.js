// Activity over time, drawn from the /v0/metrics snapshots the console already polls.
//
// - Each poll hands its JSON snapshot here (sample()); the page keeps HISTORY samples per
//   topic and per named cursor, in memory only: the charts start empty on every load and
//   cover the last few minutes, not the server's history (Prometheus is for that).
// - Rates are differences between two samples over the time between them:
//     writes/s  = Δ topics_topic_head_seq (seqs assigned: records written, routed in, or
//                 enqueued; a delete does not move the head)
//     reads/s   = Δ Σ topics_cursor_seq over the topic's named cursors (records consumed
//                 and committed; reads that commit nothing, such as a tail, do not count)
//   A counter that goes down (a topic deleted and made again, a cursor set back) gives no
//   rate for that step rather than a negative one.
// - Queue depth is topics_topic_queue_{ready,in_flight,scheduled}; cursor lag is
//   topics_cursor_lag. The per-topic block is capped at 1,000 topics (the server's
//   topics_topic_metrics_truncated): a topic past the cap has no charts, and says so.
// - The charts are inline SVG built with createElementNS (no CDN, no library: the page
//   works offline and under its Content-Security-Policy). Each chart carries data-points
//   and data-last, and an aria-label that says the same in words.
"use strict";

(() => {
  const HISTORY = 150;          // samples kept (5 min at the 2 s poll)
  const SVG = "http://www.w3.org/2000/svg";
  const W = 300, H = 64;        // chart viewBox; the CSS sizes it
  const SW = 90, SH = 20;       // sparkline viewBox

  const topics = new Map();     // topic -> [{t, head, consumed, ready, inFlight, scheduled}]
  const cursors = new Map();    // topic + "\0" + cursor -> [{t, lag}]
  const totals = [];            // [{t, head}] summed over the per-topic block
  let last = null;              // the newest snapshot
  let truncated = false;

  function push(list, item) {
    list.push(item);
    if (list.length > HISTORY) list.shift();
  }
  function historyOf(map, key) {
    let list = map.get(key);
    if (!list) { list = []; map.set(key, list); }
    return list;
  }

  // One /v0/metrics JSON snapshot taken at `now` (ms).
  function sample(m, now) {
    last = m;
    truncated = m.topics_topic_metrics_truncated === 1;
    const heads = m.topics_topic_head_seq || {};
    const seqs = m.topics_cursor_seq || {}, lags = m.topics_cursor_lag || {};
    const ready = m.topics_topic_queue_ready || {}, inFlight = m.topics_topic_queue_in_flight || {};
    const scheduled = m.topics_topic_queue_scheduled || {};
    let sum = 0;
    for (const topic of Object.keys(heads)) {
      const consumed = Object.values(seqs[topic] || {}).reduce((a, b) => a + b, 0);
      push(historyOf(topics, topic), {
        t: now, head: heads[topic], consumed,
        ready: ready[topic], inFlight: inFlight[topic], scheduled: scheduled[topic],
      });
      sum += heads[topic];
    }
    for (const topic of topics.keys()) {
      if (!(topic in heads)) { topics.delete(topic); writesCells.delete(topic); }
    }
    const seen = new Set();
    for (const topic of Object.keys(lags)) {
      for (const name of Object.keys(lags[topic])) {
        const key = topic + "\0" + name;
        seen.add(key);
        push(historyOf(cursors, key), { t: now, lag: lags[topic][name] });
      }
    }
    for (const key of cursors.keys()) if (!seen.has(key)) cursors.delete(key);
    push(totals, { t: now, head: sum });
    renderCounters();
  }

  // Per-second rates of `field` between consecutive samples: [{t, v}].
  function rates(list, field) {
    const out = [];
    for (let i = 1; i < list.length; i += 1) {
      const a = list[i - 1], b = list[i], dt = (b.t - a.t) / 1000;
      const d = b[field] - a[field];
      if (dt > 0 && d >= 0) out.push({ t: b.t, v: d / dt });
    }
    return out;
  }
  const values = (list, field) => list.filter((s) => typeof s[field] === "number").map((s) => ({ t: s.t, v: s[field] }));

  // -- numbers -------------------------------------------------------------------------
  function short(n) {
    if (typeof n !== "number" || !isFinite(n)) return "–";
    const abs = Math.abs(n);
    if (abs >= 1e9) return (n / 1e9).toFixed(1) + "G";
    if (abs >= 1e6) return (n / 1e6).toFixed(1) + "M";
    if (abs >= 1e4) return (n / 1e3).toFixed(1) + "k";
    if (Number.isInteger(n)) return String(n);
    return n.toFixed(abs < 10 ? 1 : 0);
  }
  function bytes(n) {
    if (typeof n !== "number") return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return (i ? n.toFixed(1) : String(n)) + " " + units[i];
  }

  // -- drawing -------------------------------------------------------------------------
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    return e;
  }
  function points(series, w, h, max, t0, t1) {
    const span = Math.max(1, t1 - t0);
    return series.map((p) => {
      const x = ((p.t - t0) / span) * w;
      const y = h - 2 - (p.v / max) * (h - 4);
      return x.toFixed(1) + "," + y.toFixed(1);
    }).join(" ");
  }

  // An SVG of one or more lines sharing a y axis from 0. lines: [{name, series, cls}].
  function plot(lines, w, h, cls) {
    const all = lines.flatMap((l) => l.series);
    const max = Math.max(1, ...all.map((p) => p.v));
    const t1 = all.length ? Math.max(...all.map((p) => p.t)) : 0;
    const t0 = all.length ? Math.min(...all.map((p) => p.t)) : 0;
    const root = svg("svg", { viewBox: "0 0 " + w + " " + h, preserveAspectRatio: "none", class: cls });
    root.appendChild(svg("line", { x1: 0, y1: h - 1, x2: w, y2: h - 1, class: "axis" }));
    if (lines.length === 1 && lines[0].series.length > 1) {   // one line: shade under it
      const pts = points(lines[0].series, w, h, max, t0, t1);
      const area = svg("polygon", { points: "0," + h + " " + pts + " " + w + "," + h, class: "area" });
      root.appendChild(area);
    }
    lines.forEach((l, i) => {
      if (l.series.length === 1) {      // one sample: a dot, so the chart is not blank
        const [x, y] = points(l.series, w, h, max, t0 - 1, t1).split(",");
        root.appendChild(svg("circle", { cx: x, cy: y, r: 1.5, class: "line s" + i }));
      } else if (l.series.length > 1) {
        const attrs = { points: points(l.series, w, h, max, t0, t1), class: "line s" + i };
        attrs["vector-effect"] = "non-scaling-stroke";
        root.appendChild(svg("polyline", attrs));
      }
    });
    root.dataset.points = String(Math.max(0, ...lines.map((l) => l.series.length)));
    root.dataset.peak = String(all.length ? Math.max(...all.map((p) => p.v)) : 0);
    return root;
  }

  // A captioned chart: <figure class="chart" data-chart=key data-last=…>.
  function chart(key, title, lines, unit) {
    const fig = document.createElement("figure");
    fig.className = "chart";
    fig.dataset.chart = key;
    const caption = document.createElement("figcaption");
    const now = lines.map((l) => {
      const s = l.series;
      return s.length ? s[s.length - 1].v : undefined;
    });
    fig.dataset.last = now.map((v) => (v === undefined ? "" : String(v))).join(",");
    const name = document.createElement("span");
    name.textContent = title;
    caption.appendChild(name);
    lines.forEach((l, i) => {
      const v = document.createElement("span");
      v.className = "legend s" + i;
      v.textContent = (l.name ? l.name + " " : "") + short(now[i]) + (unit || "");
      caption.appendChild(v);
    });
    fig.appendChild(caption);
    const drawn = plot(lines, W, H, "plot");
    const frame = document.createElement("div");
    frame.className = "frame";
    frame.appendChild(drawn);
    const peak = document.createElement("span");
    peak.className = "peak";
    peak.textContent = drawn.dataset.points === "0" ? "collecting…" : "peak " + short(Number(drawn.dataset.peak));
    frame.appendChild(peak);
    fig.appendChild(frame);
    const said = lines.map((l, i) => (l.name ? l.name + " " : "") + short(now[i])).join(", ");
    drawn.setAttribute("role", "img");
    drawn.setAttribute("aria-label", title + " over the last " + drawn.dataset.points + " samples, now " + said);
    return fig;
  }

  // -- the page ------------------------------------------------------------------------
  // A <td> with a sparkline of one topic's writes/s (topics table). The table is redrawn on
  // every tail frame, so a topic's cell is built once per sample and then moved, not rebuilt.
  const writesCells = new Map();   // topic -> {t, td}
  function writesCell(topic) {
    const list = topics.get(topic);
    const t = list ? list[list.length - 1].t : 0;
    const kept = writesCells.get(topic);
    if (kept && kept.t === t) return kept.td;
    const td = document.createElement("td");
    td.className = "spark writes";
    writesCells.set(topic, { t, td });
    if (!list) return td;
    const series = rates(list, "head");
    const now = series.length ? series[series.length - 1].v : undefined;
    td.appendChild(plot([{ series }], SW, SH, "sparkline"));
    const label = document.createElement("span");
    label.className = "rate";
    label.textContent = short(now);
    td.appendChild(label);
    td.title = "writes/s over the last " + series.length + " polls";
    return td;
  }

  // A <td> with a sparkline of one named cursor's lag (all-cursors table).
  function lagCell(topic, cursor) {
    const td = document.createElement("td");
    td.className = "spark lag-trend";
    const list = cursors.get(topic + "\0" + cursor);
    if (list) td.appendChild(plot([{ series: values(list, "lag") }], SW, SH, "sparkline"));
    return td;
  }

  // The open topic's charts, into #detail-charts.
  function renderTopic(topic) {
    const box = document.querySelector("#detail-charts");
    if (!box || !topic) return;
    const list = topics.get(topic);
    if (!list) {
      const note = document.createElement("p");
      note.className = "dim";
      note.textContent = last === null ? "collecting…"
        : truncated ? "not in the metrics' per-topic block (capped at 1,000 topics)"
        : "no metrics for this topic yet";
      box.replaceChildren(note);
      return;
    }
    const figs = [
      chart("writes", "writes/s", [{ series: rates(list, "head") }]),
      chart("reads", "reads/s (cursor commits)", [{ series: rates(list, "consumed") }]),
    ];
    const newest = list[list.length - 1];
    if (typeof newest.ready === "number") {
      figs.push(chart("depth", "queue depth", [
        { name: "ready", series: values(list, "ready") },
        { name: "in flight", series: values(list, "inFlight") },
        { name: "scheduled", series: values(list, "scheduled") },
      ]));
    }
    const prefix = topic + "\0";
    const lagLines = [];
    for (const [key, lags] of cursors) {
      if (key.startsWith(prefix)) lagLines.push({ name: key.slice(prefix.length), series: values(lags, "lag") });
    }
    if (lagLines.length) figs.push(chart("lag", "cursor lag", lagLines.slice(0, 6)));
    box.replaceChildren(...figs);
  }

  // The header's live counters, from the newest snapshot.
  function renderCounters() {
    const box = document.querySelector("#counters");
    if (!box || !last) return;
    const m = last;
    const writes = rates(totals, "head");
    const set = (key, text, bad) => {
      const e = box.querySelector('[data-counter="' + key + '"] b');
      if (!e) return;
      e.textContent = text;
      e.parentElement.classList.toggle("bad", !!bad);
    };
    set("topics", short(m.topics_topics));
    set("records", short(m.topics_records_live));
    set("bytes", bytes(m.topics_bytes_live));
    set("writes", writes.length ? short(writes[writes.length - 1].v) : "–");
    set("streams", short(m.topics_sse_connections));
    set("leases", short(m.topics_queue_leases_in_flight));
    const storage = m.topics_wal_read_only ? "WAL read-only" : m.topics_storage_degraded ? "refusing writes" : "ok";
    set("storage", storage, storage !== "ok");
  }

  globalThis.TopicsStats = { sample, renderTopic, writesCell, lagCell };
})();
