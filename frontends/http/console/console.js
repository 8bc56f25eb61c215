// topics web console: a static client of the /v0 API. No build step, no dependencies.
//
// - The API key (optional) lives in sessionStorage; fetches send it as
//   "Authorization: Bearer <key>", and only the EventSource URL carries ?token=<key>
//   (a browser EventSource cannot send headers; the server accepts ?token= there only).
// - Topics, routers and queue counters are polled every POLL_MS.
// - The tail is POST /v0/watch (from a little before the head) + EventSource on the wid.
// - Everything from the server is inserted with textContent, never as HTML.
// - Query parameters: ?tail=<topic> starts tailing that topic at load, ?topic=<topic>
//   opens its panel (produce, browse, cursors, config, deletes).
// - The tail and the browse take the CLI's bounds and filter (topics tail --since/--until/
//   --to/--where): `where` is the CLI's readable syntax, parsed here by filters.js (a port
//   of topics/cli/filters.py) and shown as the tuple it sends; the server checks it again,
//   and its invalid_request message is shown beside the form with nothing else changed.
//   A bounded read says when its end is reached (diff: end_reached; watch: end-reached).
// - Charts and live counters (stats.js) are drawn from the /v0/metrics snapshot each poll
//   takes; record data is a collapsible tree with a copy button (jsontree.js).
// - Every change goes through the same key and the same /v0 calls as any client; the
//   destructive ones (delete records, delete topic) take a confirmation step first.
"use strict";

(() => {
  const POLL_MS = 2000;
  const TAIL_BACKLOG = 50;      // records before the head shown when a tail starts
  const TAIL_MAX_ROWS = 500;    // rows kept in the tail view
  const MAX_TOPIC_PAGES = 10;   // 10 x 1000 topics at most per poll
  const KEY_STORE = "topics.console.apiKey";

  const $ = (sel) => document.querySelector(sel);
  const F = globalThis.TopicsFilters;   // filters.js
  const Json = globalThis.TopicsJson;   // jsontree.js: record data as a collapsible tree
  const Stats = globalThis.TopicsStats; // stats.js: charts and counters from /v0/metrics
  const state = {
    topics: [],          // last GET /v0/topics entries
    tail: null,          // {topic, wid, es, cursor}
    tailSeq: 0,          // bumped by every startTail and stopTail: a tail still opening is dropped
    detail: null,        // the topic whose panel is open
    browseNext: null,    // next_from_seq of the last browse page
    browseOpts: null,    // the bounds and where of the last Read, kept for Next page
    pending: null,       // the destructive action awaiting confirmation
    polling: false,
  };

  // -- API key -----------------------------------------------------------------------
  function apiKey() {
    try { return sessionStorage.getItem(KEY_STORE) || ""; } catch (_) { return ""; }
  }
  function setApiKey(key) {
    try {
      if (key) sessionStorage.setItem(KEY_STORE, key); else sessionStorage.removeItem(KEY_STORE);
    } catch (_) { /* storage disabled: the key is simply not remembered */ }
  }

  // -- HTTP --------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }
  // A body whose `where` may hold an integer past 2^53 (a BigInt, which JSON.stringify
  // cannot write): the rest goes through JSON.stringify, `where` through F.whereJSON.
  function bodyWithWhere(body, where) {
    const text = JSON.stringify(body);
    if (where === undefined) return text;
    return text.slice(0, -1) + (text === "{}" ? "" : ",") + '"where":' + F.whereJSON(where) + "}";
  }

  async function api(method, path, body) {
    const headers = { "Accept": "application/json" };
    const key = apiKey();
    if (key) headers["Authorization"] = "Bearer " + key;
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = typeof body === "string" ? body : JSON.stringify(body);  // a string is JSON already
    }
    const res = await fetch(path, init);
    let data = null;
    try { data = await res.json(); } catch (_) { data = null; }
    if (!res.ok) {
      const err = (data && data.error) || {};
      throw new ApiError(res.status, err.code || "http_" + res.status, err.message || res.statusText);
    }
    return data;
  }

  function status(text, kind) {
    const el = $("#status");
    el.textContent = text;
    el.className = "status" + (kind ? " " + kind : "");
  }

  function describe(err) {
    if (err instanceof ApiError) {
      if (err.status === 401) return "401: enter a valid API key";
      if (err.status === 403) return "403: " + err.message;
      return err.status + " " + err.code + ": " + err.message;
    }
    return "server unreachable (" + err.message + ")";
  }

  // -- DOM helpers -------------------------------------------------------------------
  function button(text, onClick) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = text;
    b.addEventListener("click", onClick);
    return b;
  }
  function result(sel, text, ok) {
    const el = $(sel);
    el.textContent = text;
    el.className = "result " + (ok ? "ok" : "bad");
  }
  const topicPath = (t, suffix) => "/v0/topics/" + encodeURIComponent(t) + (suffix || "");
  const isoTime = (ts) => (ts ? new Date(ts).toISOString().replace("T", " ").replace("Z", "") : "");
  function cell(text, cls) {
    const td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "" : String(text);
    if (cls) td.className = cls;
    return td;
  }
  function row(cells, cls) {
    const tr = document.createElement("tr");
    for (const c of cells) tr.appendChild(c);
    if (cls) tr.className = cls;
    return tr;
  }
  function fill(tbody, rows, cols, emptyText) {
    tbody.replaceChildren(...rows);
    if (!rows.length) {
      const td = cell(emptyText, "empty");
      td.colSpan = cols;
      tbody.appendChild(row([td]));
    }
  }
  const fmt = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : n === undefined ? "" : String(n));
  function fmtBytes(n) {
    if (typeof n !== "number") return "";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return (i ? n.toFixed(1) : String(n)) + " " + units[i];
  }

  // -- topics ------------------------------------------------------------------------
  async function listAll(path, field, params) {
    const out = [];
    let cursor = null;
    for (let page = 0; page < MAX_TOPIC_PAGES; page += 1) {
      const q = new URLSearchParams(params);
      q.set("page_size", "1000");
      if (cursor) q.set("cursor", cursor);
      const data = await api("GET", path + "?" + q.toString());
      out.push(...(data[field] || []));
      cursor = data.next_cursor;
      if (!cursor) return { items: out, truncated: false };
    }
    return { items: out, truncated: true };
  }

  function tailLag(t) {
    const tail = state.tail;
    if (!tail || tail.topic !== t.topic || tail.cursor === null) return "";
    return Math.max(0, t.head_seq - tail.cursor);
  }

  function renderTopics() {
    const filter = $("#topic-filter").value;
    const rows = [];
    for (const t of state.topics) {
      if (filter && !t.topic.startsWith(filter)) continue;
      const btn = document.createElement("button");
      btn.type = "button";
      btn.textContent = "tail";
      btn.addEventListener("click", () => startTail(t.topic));
      const action = document.createElement("td");
      action.appendChild(button("open", () => openTopic(t.topic)));
      action.appendChild(btn);
      const lag = tailLag(t);
      rows.push(row([
        cell(t.topic, "mono topic-name"), cell(t.type), cell(t.durability),
        cell(fmt(t.earliest_seq), "num"), cell(fmt(t.head_seq), "num head"),
        cell(fmt(t.count), "num count"), cell(fmtBytes(t.bytes), "num"),
        cell(fmt(lag), "num lag" + (lag !== "" && lag > 1000 ? " lag-bad" : "")),
        Stats.writesCell(t.topic), action,
      ], (state.tail && state.tail.topic === t.topic) || state.detail === t.topic ? "selected" : ""));
    }
    fill($("#topics tbody"), rows, 10, filter ? "no topic with this prefix" : "no topics yet");
  }

  async function pollTopics() {
    const { items, truncated } = await listAll("/v0/topics", "topics", {});
    state.topics = items;
    $("#topics-meta").textContent = items.length + (truncated ? "+ (first pages only)" : "") + " topics";
    renderTopics();
  }

  // -- routers -----------------------------------------------------------------------
  async function pollRouters() {
    const { items } = await listAll("/v0/routers", "routers", {});
    const details = await Promise.all(items.map((r) =>
      api("GET", "/v0/routers/" + encodeURIComponent(r.router)).catch(() => r)));
    const rows = details.map((r) => row([
      cell(r.router, "mono"), cell(r.source, "mono"), cell(r.dest, "mono"), cell(r.guarantee),
      cell(fmt(r.forwarded_total), "num"), cell(fmt(r.dropped_total), "num"),
      cell(fmt(r.cursor), "num"), cell(fmt(r.lag), "num" + (r.lag > 1000 ? " lag-bad" : "")),
    ]));
    $("#routers-meta").textContent = items.length + " routers";
    fill($("#routers tbody"), rows, 8, "no routers");
  }

  // -- queues ------------------------------------------------------------------------
  async function pollQueues() {
    const queues = state.topics.filter((t) => t.type === "queue").slice(0, 200);
    const details = await Promise.all(queues.map((t) =>
      api("GET", "/v0/topics/" + encodeURIComponent(t.topic) + "?touch=false").catch(() => null)));
    const counts = new Map(state.topics.map((t) => [t.topic, t.count]));
    const rows = [];
    for (const d of details) {
      if (!d) continue;
      const q = d.queue || {};
      const dlq = (d.config && d.config.dead_letter) || "";
      const held = dlq ? counts.get(dlq) : undefined;
      const action = document.createElement("td");
      if (dlq && held > 0) action.appendChild(button("redrive", () => redrive(dlq)));
      rows.push(row([
        cell(d.topic, "mono"), cell(fmt(d.head_seq), "num"), cell(fmt(q.ready), "num ready"),
        cell(fmt(q.in_flight), "num in-flight"), cell(fmt(q.backoff), "num backoff"),
        cell(fmt(q.dead_lettered), "num dead" + (q.dead_lettered > 0 ? " lag-bad" : "")),
        cell(dlq, "mono"), cell(fmt(held), "num dlq-count" + (held > 0 ? " lag-bad" : "")), action,
      ]));
    }
    $("#queues-meta").textContent = rows.length + " queues";
    fill($("#queues tbody"), rows, 9, "no queue topics");
  }

  // POST /v0/topics/:dlq/redrive: every dead letter back to the queue it came from.
  async function redrive(dlq) {
    try {
      const res = await api("POST", topicPath(dlq, "/redrive"), {});
      result("#queues-result", "redrove " + fmt(res.moved) + " from " + dlq, true);
      poll();
    } catch (err) { result("#queues-result", describe(err), false); }
  }

  // -- cursors (every topic's, from the /v0/metrics gauges), charts, counters -----------
  async function pollCursors() {
    const m = await api("GET", "/v0/metrics");
    Stats.sample(m, Date.now());
    if (state.detail) Stats.renderTopic(state.detail);
    const lags = m.topics_cursor_lag || {}, seqs = m.topics_cursor_seq || {};
    const rows = [];
    for (const topic of Object.keys(lags).sort()) {
      for (const name of Object.keys(lags[topic]).sort()) {
        const lag = lags[topic][name];
        rows.push(row([
          cell(topic, "mono"), cell(name, "mono cursor-name"),
          cell(fmt((seqs[topic] || {})[name]), "num"),
          cell(fmt(lag), "num cursor-lag" + (lag > 1000 ? " lag-bad" : "")),
          Stats.lagCell(topic, name),
        ]));
      }
    }
    $("#all-cursors-meta").textContent = rows.length + " cursors";
    fill($("#all-cursors tbody"), rows, 5, "no consumer cursors");
  }

  async function poll() {
    if (state.polling) return;
    state.polling = true;
    try {
      await pollTopics();
      await Promise.all([pollRouters(), pollQueues(), pollCursors()]);
      if (state.detail) await loadCursors(state.detail);
      status("live · " + new Date().toLocaleTimeString(), "ok");
    } catch (err) {
      status(describe(err), "bad");
    } finally {
      state.polling = false;
    }
  }

  // -- tail --------------------------------------------------------------------------
  function tailState(text) { $("#tail-state").textContent = text; }

  function tailNote(text, cls) {
    const td = cell(text);
    td.colSpan = 5;
    addTailRows([row([td], cls || "note")]);
  }

  function addTailRows(rows) {
    if ($("#tail-pause").checked) return;
    const tbody = $("#tail tbody");
    for (const r of rows) tbody.insertBefore(r, tbody.firstChild);   // newest first
    while (tbody.childElementCount > TAIL_MAX_ROWS) tbody.removeChild(tbody.lastChild);
  }

  function stopTail() {
    state.tailSeq += 1;
    const tail = state.tail;
    if (tail && tail.es) tail.es.close();
    state.tail = null;
    $("#tail-stop").disabled = true;
    tailState("stopped");
    renderTopics();
  }

  // -- bounds and filters (the CLI's --since/--until/--to/--where) -----------------------
  // The where field's tuple (or its syntax error) is shown as the user types; an empty
  // field is no filter. Throws F.FilterSyntaxError for text that does not parse.
  function readWhere(input, out) {
    const text = input.value;
    out.className = "tuple";
    if (!text.trim()) { out.textContent = ""; return undefined; }
    try {
      const expr = F.parseWhere(text);
      out.textContent = "where " + F.whereJSON(expr);
      return expr;
    } catch (err) {
      out.textContent = "where: " + err.message;
      out.className = "tuple bad";
      throw err;
    }
  }
  function previewWhere(input, out) {
    try { readWhere(input, out); } catch (_) { /* shown in out */ }
  }

  // The tail's watch options: {bounds: {from_ts?, to_ts?, to_seq?}, where?, text}; a bad
  // field throws after saying so beside the form.
  function tailOptions() {
    const now = Date.now(), bounds = {}, text = [];
    for (const [sel, key] of [["#tail-since", "from_ts"], ["#tail-until", "to_ts"]]) {
      const raw = $(sel).value.trim();
      if (!raw) continue;
      try { bounds[key] = F.parseTime(raw, now); } catch (err) {
        result("#tail-error", (key === "from_ts" ? "since: " : "until: ") + err.message, false);
        throw err;
      }
      text.push((key === "from_ts" ? "since " : "until ") + raw + " (" + isoTime(bounds[key]) + ")");
    }
    const to = $("#tail-to").value;
    if (to !== "") { bounds.to_seq = Number(to); text.push("to seq " + to); }
    let where;
    try { where = readWhere($("#tail-where"), $("#tail-where-tuple")); } catch (err) {
      result("#tail-error", "", true);
      throw err;
    }
    if (where !== undefined) text.push("where " + F.whereJSON(where));
    return { bounds, where, text };
  }

  // Opens the new watch before letting go of the current tail, so input the server
  // refuses (400) leaves the running tail as it was, with the message beside the form.
  async function startTail(topic) {
    let opts;
    try { opts = tailOptions(); } catch (_) { return; }
    result("#tail-error", "", true);
    const seq = ++state.tailSeq;
    if (!state.tail) {
      $("#tail-topic").textContent = topic;
      tailState("opening…");
      $("#tail-stop").disabled = false;
    }
    let session, fromSeq;
    try {
      const info = await api("GET", "/v0/topics/" + encodeURIComponent(topic) + "?touch=false");
      fromSeq = Math.max(0, (info.head_seq || 0) - TAIL_BACKLOG);
      const start = opts.bounds.from_ts === undefined ? { from_seq: fromSeq } : {};
      session = await api("POST", "/v0/watch", bodyWithWhere({
        topics: { [topic]: { ...start, ...opts.bounds } },
        include_tags: $("#tail-tags").checked,
        include_meta: false,
      }, opts.where));
    } catch (err) {
      if (seq !== state.tailSeq) return;         // stopped, or another tail started meanwhile
      if (err instanceof ApiError && err.status === 400) {
        result("#tail-error", describe(err), false);
        if (!state.tail) { tailState("not started"); $("#tail-stop").disabled = true; }
        return;
      }
      stopTail();
      $("#tail tbody").replaceChildren();
      $("#tail-topic").textContent = topic;
      tailState(describe(err));
      return;
    }
    if (seq !== state.tailSeq) return;
    if (state.tail) stopTail();
    $("#tail tbody").replaceChildren();
    $("#tail-topic").textContent = topic;
    tailState("opening…");
    const tail = { topic, wid: session.wid, es: null, cursor: null };
    state.tail = tail;
    $("#tail-stop").disabled = false;
    history.replaceState(null, "", "?tail=" + encodeURIComponent(topic));
    try {
      const echoed = (session.topics || {})[topic];
      tail.cursor = echoed && typeof echoed.from_seq === "number" ? echoed.from_seq : fromSeq;
      if (opts.text.length) tailNote("reading after seq " + fmt(tail.cursor) + " · " + opts.text.join(" · "));
      const key = apiKey();
      const url = session.stream_url + (key ? "?token=" + encodeURIComponent(key) : "");
      const es = new EventSource(url);
      tail.es = es;
      es.addEventListener("connection-established", () => tailState("connected"));
      es.addEventListener("record", (e) => {
        const frame = JSON.parse(e.data);
        const rows = frame.records.map((r) => row([
          cell(r.$seq, "num seq"), cell(r.$ts ? new Date(r.$ts).toISOString().replace("T", " ").replace("Z", "") : ""),
          cell(r.$tag || "", "mono"), cell(r.$node || "", "mono"),
          Json.cell(r.data),
        ], "record"));
        addTailRows(rows);
        tail.cursor = frame.to_seq;
        const lag = frame.head_seq - frame.to_seq;
        tailState(lag > 0 ? "catching up, " + fmt(lag) + " behind" : "live");
        renderTopics();
      });
      es.addEventListener("caught-up", (e) => {
        const d = JSON.parse(e.data);
        tail.cursor = Math.max(tail.cursor || 0, d.head_seq);
        tailState("live at " + fmt(d.head_seq));
        renderTopics();
      });
      es.addEventListener("end-reached", (e) => {
        // The topic has left the session (its last frame is committed): nothing more
        // will come for it, so the stream is closed rather than left to idle.
        const d = JSON.parse(e.data);
        es.close();
        tail.cursor = d.next_from_seq;
        $("#tail-stop").disabled = true;
        tailNote("end reached: read up to seq " + fmt(d.next_from_seq) + " (head " + fmt(d.head_seq) + ")", "end");
        tailState("end reached at seq " + fmt(d.next_from_seq));
        renderTopics();
      });
      es.addEventListener("tombstone", (e) => {
        const d = JSON.parse(e.data);
        tail.cursor = d.gap_to;
        tailNote("tombstone: seqs " + d.gap_from + "–" + d.gap_to + " lost (" + d.reason + ")", "tombstone");
      });
      es.addEventListener("topic-deleted", () => {
        tailNote("the topic was deleted");
        es.close();
        tailState("topic deleted");
      });
      es.addEventListener("connection-closing", (e) => {
        const d = JSON.parse(e.data);
        tailState("server closing (" + d.reason + "), reconnecting…");
      });
      es.addEventListener("error", (e) => {
        if (e.data) {                           // the server's terminal/advisory error frame
          const d = JSON.parse(e.data);
          tailNote("stream error " + (d.error_code || d.code) + ": " + (d.message || ""));
          if (d.code === 410) { es.close(); tailState("session gone — press tail again"); }
          return;
        }
        tailState(es.readyState === EventSource.CLOSED ? "closed (check the API key)" : "reconnecting…");
      });
    } catch (err) {
      if (state.tail === tail) {
        tailState(describe(err));
        $("#tail-stop").disabled = true;
        state.tail = null;
      }
    }
  }

  // -- one topic: produce, browse, cursors, config, deletes ---------------------------
  async function openTopic(topic) {
    state.detail = topic;
    state.browseNext = null;
    cancelConfirm();
    $("#detail-topic").textContent = topic;
    $("#detail").hidden = false;
    $("#browse tbody").replaceChildren();
    Stats.renderTopic(topic);
    for (const sel of ["#produce-result", "#browse-meta", "#config-result", "#delete-result"]) $(sel).textContent = "";
    history.replaceState(null, "", "?topic=" + encodeURIComponent(topic));
    renderTopics();
    try {
      const info = await api("GET", topicPath(topic, "?touch=false"));
      $("#detail-state").textContent = info.type + " · head " + fmt(info.head_seq) + " · " + fmt(info.count) + " records";
      $("#config-json").value = JSON.stringify(info.config, null, 2);
      await loadCursors(topic);
    } catch (err) {
      $("#detail-state").textContent = describe(err);
    }
  }

  async function loadCursors(topic) {
    const data = await api("GET", topicPath(topic, "/cursors"));
    const rows = (data.cursors || []).map((c) => row([
      cell(c.cursor, "mono cursor-name"), cell(fmt(c.seq), "num"),
      cell(fmt(c.lag), "num cursor-lag" + (c.lag > 1000 ? " lag-bad" : "")), cell(isoTime(c.updated_ts)),
    ]));
    if (state.detail === topic) fill($("#cursors tbody"), rows, 4, "no cursors on this topic");
  }

  async function produce(e) {
    e.preventDefault();
    const topic = state.detail;
    const text = $("#produce-data").value;
    try { JSON.parse(text); } catch (_) {
      return result("#produce-result", "data is not JSON", false);
    }
    // The text goes as typed (the server keeps data verbatim: 1.50 stays 1.50).
    const tag = $("#produce-tag").value.trim();
    const body = '{"records":[{"data":' + text + (tag ? ',"tag":' + JSON.stringify(tag) : "") + "}]}";
    try {
      const res = await api("POST", topicPath(topic), body);
      result("#produce-result", "wrote seq " + res.first_seq, true);
      poll();
    } catch (err) { result("#produce-result", describe(err), false); }
  }

  // The browse's end and filter: {bounds: {to_ts?, to_seq?}, where?}; a where that does
  // not parse throws (its message is under the field).
  function browseOptions() {
    const bounds = {};
    const until = $("#browse-until").value, to = $("#browse-to").value;
    if (until) bounds.to_ts = new Date(until).getTime();
    if (to !== "") bounds.to_seq = Number(to);
    return { bounds, where: readWhere($("#browse-where"), $("#browse-where-tuple")) };
  }

  async function browse(fromSeq) {
    const topic = state.detail;
    let opts = state.browseOpts;
    if (fromSeq === null) {                      // Read: this form's options; Next page: the last ones
      try { opts = browseOptions(); } catch (_) { return; }
    }
    const body = { limit: 50, include_tags: true };
    const time = $("#browse-time").value;
    if (fromSeq === null && time) body.from_ts = new Date(time).getTime();
    else body.from_seq = fromSeq === null ? Number($("#browse-from").value || 0) : fromSeq;
    Object.assign(body, opts ? opts.bounds : {});
    try {
      const res = await api("POST", topicPath(topic, "/diff"), bodyWithWhere(body, opts ? opts.where : undefined));
      state.browseOpts = opts;
      const rows = res.records.map((r) => row([
        cell(r.$seq, "num seq"), cell(isoTime(r.$ts)), cell(r.$tag || "", "mono"),
        Json.cell(r.data),
      ], "record"));
      if (res.tombstone) {
        const td = cell("tombstone: seqs " + res.tombstone.gap_from + "–" + res.tombstone.gap_to + " lost (" + res.tombstone.reason + ")");
        td.colSpan = 4;
        rows.unshift(row([td], "tombstone"));
      }
      fill($("#browse tbody"), rows, 4, "no records after this point");
      state.browseNext = res.caught_up || res.end_reached ? null : res.next_from_seq;
      $("#browse-next").disabled = state.browseNext === null;
      const flags = [res.caught_up && "caught up", res.end_reached && "end reached"].filter(Boolean);
      result("#browse-meta", res.records.length + " records, next after seq " + res.next_from_seq
        + (flags.length ? " (" + flags.join(", ") + ")" : "")
        + (typeof res.from_seq === "number" && body.from_ts !== undefined ? " · the time is after seq " + res.from_seq : ""), true);
    } catch (err) { result("#browse-meta", describe(err), false); }
  }

  async function saveConfig(e) {
    e.preventDefault();
    let config;
    try { config = JSON.parse($("#config-json").value); } catch (_) {
      return result("#config-result", "the config is not JSON", false);
    }
    try {
      const res = await api("PUT", topicPath(state.detail), config);
      $("#config-json").value = JSON.stringify(res.config, null, 2);
      result("#config-result", "saved", true);
    } catch (err) { result("#config-result", describe(err), false); }
  }

  // Destructive actions: the first click only arms a confirmation (and, for a topic
  // delete, the topic name must be typed); nothing is sent before Confirm.
  function askConfirm(text, needsName, action) {
    state.pending = { action, needsName, topic: state.detail };
    $("#confirm-text").textContent = text;
    $("#confirm-input").value = "";
    $("#confirm-input").hidden = !needsName;
    $("#confirm").hidden = false;
  }
  function cancelConfirm() {
    state.pending = null;
    $("#confirm").hidden = true;
  }
  async function confirmPending() {
    const p = state.pending;
    if (!p || p.topic !== state.detail) return cancelConfirm();
    if (p.needsName && $("#confirm-input").value !== p.topic) {
      return result("#delete-result", "type the topic name to confirm", false);
    }
    cancelConfirm();
    try {
      result("#delete-result", await p.action(), true);
    } catch (err) { result("#delete-result", describe(err), false); }
    poll();
  }
  function deleteRecords(e) {
    e.preventDefault();
    const topic = state.detail, before = Number($("#delete-before").value);
    if (!(before >= 1)) return result("#delete-result", "give a seq of 1 or more", false);
    askConfirm("Delete every record of " + topic + " before seq " + before + "? This cannot be undone.", false,
      async () => {
        const res = await api("POST", topicPath(topic, "/delete"), { before_seq: before });
        return "deleted " + fmt(res.deleted) + " records";
      });
  }
  function deleteTopic() {
    const topic = state.detail;
    askConfirm("Delete topic " + topic + " and everything in it? Type its name:", true, async () => {
      const res = await api("DELETE", topicPath(topic));
      $("#detail-state").textContent = res.deleted ? "deleted" : "was already gone";
      return res.deleted ? "topic deleted" : "no such topic";
    });
  }

  // -- wiring ------------------------------------------------------------------------
  function init() {
    $("#api-key").value = apiKey();
    $("#key-form").addEventListener("submit", (e) => {
      e.preventDefault();
      setApiKey($("#api-key").value.trim());
      const topic = state.tail && state.tail.topic;
      if (topic) startTail(topic);
      poll();
    });
    $("#key-clear").addEventListener("click", () => {
      $("#api-key").value = "";
      setApiKey("");
      poll();
    });
    $("#topic-filter").addEventListener("input", renderTopics);
    $("#tail-stop").addEventListener("click", stopTail);
    $("#tail-clear").addEventListener("click", () => $("#tail tbody").replaceChildren());
    $("#tail-form").addEventListener("submit", (e) => {
      e.preventDefault();
      if (state.tail) startTail(state.tail.topic);
      else result("#tail-error", "press tail on a topic", false);
    });
    $("#tail-where").addEventListener("input", () => previewWhere($("#tail-where"), $("#tail-where-tuple")));
    $("#browse-where").addEventListener("input", () => previewWhere($("#browse-where"), $("#browse-where-tuple")));
    $("#produce-form").addEventListener("submit", produce);
    $("#browse-form").addEventListener("submit", (e) => { e.preventDefault(); browse(null); });
    $("#browse-next").addEventListener("click", () => browse(state.browseNext));
    $("#config-form").addEventListener("submit", saveConfig);
    $("#delete-records-form").addEventListener("submit", deleteRecords);
    $("#delete-topic").addEventListener("click", deleteTopic);
    $("#confirm-yes").addEventListener("click", confirmPending);
    $("#confirm-no").addEventListener("click", cancelConfirm);
    const params = new URLSearchParams(location.search);
    const wanted = params.get("tail");
    if (wanted) startTail(wanted);
    if (params.get("topic")) openTopic(params.get("topic"));
    poll();
    setInterval(poll, POLL_MS);
  }

  init();
})();
