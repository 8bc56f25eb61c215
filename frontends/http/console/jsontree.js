// Record data as a collapsible JSON tree, with a copy button (the console's data cells).
//
// - Folded, a record is its one-line JSON (cut at LINE_MAX), so a tail still scans like a
//   log; unfolded it is a tree of <details> nodes, each object or array folding on its own.
//   <details> does the folding, so no click handler can get out of step with what is shown.
// - The tree is built on the first unfold only: a tail keeps 500 rows and most are never
//   opened.
// - Copy puts the data as indented JSON on the clipboard. The data went through the
//   browser's JSON.parse, so it is the value as JavaScript reads it (1.50 is copied as 1.5,
//   an integer past 2^53 rounded); `topics read` gives the bytes as stored.
// - Everything is inserted with textContent, never as HTML.
"use strict";

(() => {
  const LINE_MAX = 200;   // characters of the folded one-line form
  const OPEN_DEPTH = 2;   // unfolding a record opens its nodes this deep

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function oneLine(value) {
    const text = JSON.stringify(value);
    return text.length > LINE_MAX ? text.slice(0, LINE_MAX - 1) + "…" : text;
  }

  function scalar(value) {
    return el("span", "j-" + (value === null ? "null" : typeof value), JSON.stringify(value));
  }

  // One object or array: a <details> whose summary counts its members.
  function branch(value, depth) {
    const keys = Array.isArray(value) ? value.map((_, i) => i) : Object.keys(value);
    const node = el("details", "j-node");
    node.open = depth < OPEN_DEPTH;
    const label = Array.isArray(value) ? "[" + keys.length + "]" : "{" + keys.length + "}";
    node.appendChild(el("summary", "j-count", label));
    const list = el("ul", "j-members");
    for (const k of keys) {
      const li = el("li");
      li.appendChild(el("span", "j-key", Array.isArray(value) ? String(k) : JSON.stringify(k)));
      li.appendChild(document.createTextNode(": "));
      li.appendChild(tree(value[k], depth + 1));
      list.appendChild(li);
    }
    node.appendChild(list);
    return node;
  }

  function tree(value, depth) {
    return value !== null && typeof value === "object" ? branch(value, depth) : scalar(value);
  }

  async function copyText(text, btn) {
    let ok = false;
    try {
      await navigator.clipboard.writeText(text);
      ok = true;
    } catch (_) {
      // No async clipboard (an http:// origin that is not loopback): the old way.
      const area = el("textarea");
      area.value = text;
      document.body.appendChild(area);
      area.select();
      try { ok = document.execCommand("copy"); } catch (_) { ok = false; }
      area.remove();
    }
    btn.textContent = ok ? "copied" : "copy failed";
    setTimeout(() => { btn.textContent = "copy"; }, 1500);
  }

  // The <td class="data"> for one record's data (undefined: no data, an empty cell).
  function cell(data) {
    const td = el("td", "data");
    if (data === undefined) return td;
    const copy = el("button", "copy", "copy");
    copy.type = "button";
    copy.title = "copy the data as JSON";
    copy.addEventListener("click", () => copyText(JSON.stringify(data, null, 2), copy));
    td.appendChild(copy);
    if (data === null || typeof data !== "object") {
      td.appendChild(scalar(data));
      return td;
    }
    const root = el("details", "j-record");
    root.appendChild(el("summary", "j-line", oneLine(data)));
    root.addEventListener("toggle", () => {
      if (root.open && root.childElementCount === 1) root.appendChild(tree(data, 0));
    });
    td.appendChild(root);
    return td;
  }

  globalThis.TopicsJson = { cell };
})();
