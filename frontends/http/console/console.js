// topics web console: a static client of the /v0 API. No build step, no dependencies.
//
// - The API key (optional) lives in sessionStorage; fetches send it as
//   "Authorization: Bearer <key>", and only the EventSource URL carries ?token=<key>
//   (a browser EventSource cannot send headers; the server accepts ?token= there only).
// - Topics, routers and queue counters are polled every POLL_MS.
// - The tail is POST /v0/watch (from a little before the head) + EventSource on the wid.
// - Everything from the server is inserted with textContent, never as HTML.
// - Query parameters: ?tail=<topic> starts tailing that topic at load.
"use strict";

(() => {
  const POLL_MS = 2000;
  const TAIL_BACKLOG = 50;      // records before the head shown when a tail starts
  const TAIL_MAX_ROWS = 500;    // rows kept in the tail view
  const MAX_TOPIC_PAGES = 10;   // 10 x 1000 topics at most per poll
  const KEY_STORE = "topics.console.apiKey";

  const $ = (sel) => document.querySelector(sel);
  const state = {
    topics: [],          // last GET /v0/topics entries
    tail: null,          // {topic, wid, es, cursor}
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

  async function api(method, path, body) {
    const headers = { "Accept": "application/json" };
    const key = apiKey();
    if (key) headers["Authorization"] = "Bearer " + key;
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
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
      action.appendChild(btn);
      const lag = tailLag(t);
      rows.push(row([
        cell(t.topic, "mono topic-name"), cell(t.type), cell(t.durability),
        cell(fmt(t.earliest_seq), "num"), cell(fmt(t.head_seq), "num head"),
        cell(fmt(t.count), "num count"), cell(fmtBytes(t.bytes), "num"),
        cell(fmt(lag), "num lag" + (lag !== "" && lag > 1000 ? " lag-bad" : "")), action,
      ], state.tail && state.tail.topic === t.topic ? "selected" : ""));
    }
    fill($("#topics tbody"), rows, 9, filter ? "no topic with this prefix" : "no topics yet");
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
    const rows = [];
    for (const d of details) {
      if (!d) continue;
      const q = d.queue || {};
      rows.push(row([
        cell(d.topic, "mono"), cell(fmt(d.head_seq), "num"), cell(fmt(q.ready), "num ready"),
        cell(fmt(q.in_flight), "num in-flight"),
        cell(fmt(q.dead_lettered), "num dead" + (q.dead_lettered > 0 ? " lag-bad" : "")),
        cell((d.config && d.config.dead_letter) || "", "mono"),
      ]));
    }
    $("#queues-meta").textContent = rows.length + " queues";
    fill($("#queues tbody"), rows, 6, "no queue topics");
  }

  async function poll() {
    if (state.polling) return;
    state.polling = true;
    try {
      await pollTopics();
      await Promise.all([pollRouters(), pollQueues()]);
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
    const tail = state.tail;
    if (tail && tail.es) tail.es.close();
    state.tail = null;
    $("#tail-stop").disabled = true;
    tailState("stopped");
    renderTopics();
  }

  async function startTail(topic) {
    if (state.tail) stopTail();
    $("#tail tbody").replaceChildren();
    $("#tail-topic").textContent = topic;
    tailState("opening…");
    const tail = { topic, wid: null, es: null, cursor: null };
    state.tail = tail;
    $("#tail-stop").disabled = false;
    history.replaceState(null, "", "?tail=" + encodeURIComponent(topic));
    try {
      const info = await api("GET", "/v0/topics/" + encodeURIComponent(topic) + "?touch=false");
      const fromSeq = Math.max(0, (info.head_seq || 0) - TAIL_BACKLOG);
      const session = await api("POST", "/v0/watch", {
        topics: { [topic]: { from_seq: fromSeq } },
        include_tags: $("#tail-tags").checked,
        include_meta: false,
      });
      if (state.tail !== tail) return;           // another tail started meanwhile
      tail.wid = session.wid;
      tail.cursor = fromSeq;
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
          cell(r.data === undefined ? "" : JSON.stringify(r.data), "data"),
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
    const wanted = new URLSearchParams(location.search).get("tail");
    if (wanted) startTail(wanted);
    poll();
    setInterval(poll, POLL_MS);
  }

  init();
})();
