// The CLI's readable filter and time syntax (topics/cli/filters.py), for the console.
//
// A port of the Python module, rule for rule and message for message, so that what a user
// types into the console's `where` field means what `topics tail --where` makes of it
// (tests/integration/test_console.py runs one table of cases through both):
//
//     kind=refund                      ["data.kind", "Eq", "refund"]
//     data.kind!=refund                ["data.kind", "Ne", "refund"]
//     amount>3   amount>=3  a<3  a<=3  ["data.amount", "Gt", 3] ...
//     tag=chat-42:*                    ["tag", "Glob", "chat-42:*"]   (a trailing bare *)
//     kind in refund,chargeback        ["data.kind", "In", ["refund", "chargeback"]]
//     has meta.urgent                  ["meta.urgent", "Exists"]
//     a=1 and (b=2 or not c=3)         ["and", [..., ["or", [..., ["not", ...]]]]]
//
// Where JavaScript and Python differ underneath, the Python meaning wins:
// - whitespace is Python's (str.isspace), not JavaScript's \s;
// - an integer past 2^53 stays exact (a BigInt, written out by whereJSON), as Python's int;
// - messages quote text the way Python's repr() does.
// Loaded as a plain script it defines globalThis.TopicsFilters; under node, module.exports.
"use strict";

(function (root) {
  const WS = "\\t\\n\\v\\f\\r \\x1c-\\x1f\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
  const TOKEN = new RegExp(
    "[" + WS + "]*(?:(\"(?:[^\"\\\\]|\\\\[^\\n])*\")|(!=|>=|<=|=|>|<|\\(|\\)|,)|([^" + WS + "\"=!<>(),]+))", "y");
  const OPS = { "=": "Eq", "!=": "Ne", ">": "Gt", ">=": "Ge", "<": "Lt", "<=": "Le" };
  const UNITS = { ms: 1, s: 1000, m: 60000, h: 3600000, d: 86400000 };
  const NUMBER = /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/;
  const INTEGER = /^-?[0-9]+$/;
  const EDGE_WS = new RegExp("^[" + WS + "]+|[" + WS + "]+$", "g");
  const TRAILING_WS = new RegExp("[" + WS + "]+$");

  class FilterSyntaxError extends Error {
    constructor(message) { super(message); this.name = "FilterSyntaxError"; }
  }

  const strip = (text) => text.replace(EDGE_WS, "");

  // Python's repr() of a str, for messages that quote the input as the CLI's do: what
  // str.isprintable() refuses (controls, format characters, separators but the space,
  // unassigned code points) is written as an escape.
  const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;
  function pyRepr(text) {
    const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
    let out = quote;
    for (const ch of text) {
      const code = ch.codePointAt(0);
      if (ch === "\\") out += "\\\\";
      else if (ch === quote) out += "\\" + quote;
      else if (ch === "\n") out += "\\n";
      else if (ch === "\r") out += "\\r";
      else if (ch === "\t") out += "\\t";
      else if (ch === " " || !UNPRINTABLE.test(ch)) out += ch;
      else if (code < 0x100) out += "\\x" + code.toString(16).padStart(2, "0");
      else if (code < 0x10000) out += "\\u" + code.toString(16).padStart(4, "0");
      else out += "\\U" + code.toString(16).padStart(8, "0");
    }
    return out + quote;
  }

  function tokens(text) {
    const out = [];
    text = text.replace(TRAILING_WS, "");
    let pos = 0;
    while (pos < text.length) {
      TOKEN.lastIndex = pos;
      const m = TOKEN.exec(text);
      if (m === null || TOKEN.lastIndex === pos) {
        throw new FilterSyntaxError("cannot read " + pyRepr(strip(text.slice(pos))) + " (at character " + pos + ")");
      }
      if (m[1] !== undefined) out.push(["str", m[1]]);
      else if (m[2] !== undefined) out.push(["op", m[2]]);
      else out.push(["word", m[3]]);
      pos = TOKEN.lastIndex;
    }
    return out;
  }

  function field(name) {
    if (name === "tag" || name === "node" || name.startsWith("data.") || name.startsWith("meta.")) return name;
    return "data." + name;
  }

  function value(kind, raw) {
    if (kind === "str") {
      try { return JSON.parse(raw); } catch (_) {
        throw new FilterSyntaxError("cannot read " + pyRepr(raw) + ": not a JSON string");
      }
    }
    if (raw === "true") return true;
    if (raw === "false") return false;
    if (raw === "null") return null;
    if (NUMBER.test(raw)) {
      const n = Number(raw);
      return INTEGER.test(raw) && !Number.isSafeInteger(n) ? BigInt(raw) : n;
    }
    return raw;
  }

  class Parser {
    constructor(text) { this.toks = tokens(text); this.i = 0; }
    peek() { return this.i < this.toks.length ? this.toks[this.i] : null; }
    take() {
      const tok = this.peek();
      if (tok === null) throw new FilterSyntaxError("the filter ends too early");
      this.i += 1;
      return tok;
    }
    wordIs(word) {
      const tok = this.peek();
      return tok !== null && tok[0] === "word" && tok[1].toLowerCase() === word;
    }
    isOp(op) {
      const tok = this.peek();
      return tok !== null && tok[0] === "op" && tok[1] === op;
    }
    expr() {
      const terms = [this.conj()];
      while (this.wordIs("or")) { this.i += 1; terms.push(this.conj()); }
      return terms.length === 1 ? terms[0] : ["or", terms];
    }
    conj() {
      const terms = [this.unary()];
      while (this.wordIs("and")) { this.i += 1; terms.push(this.unary()); }
      return terms.length === 1 ? terms[0] : ["and", terms];
    }
    unary() {
      if (this.wordIs("not")) { this.i += 1; return ["not", this.unary()]; }
      if (this.wordIs("has")) { this.i += 1; return [field(this.name()), "Exists"]; }
      if (this.isOp("(")) {
        this.i += 1;
        const inner = this.expr();
        const [kind, tok] = this.take();
        if (kind !== "op" || tok !== ")") throw new FilterSyntaxError("a ( is not closed");
        return inner;
      }
      const f = field(this.name());
      if (this.wordIs("in")) {
        this.i += 1;
        const values = [value(...this.valueToken())];
        while (this.isOp(",")) { this.i += 1; values.push(value(...this.valueToken())); }
        return [f, "In", values];
      }
      const [kind, op] = this.take();
      if (kind !== "op" || !Object.prototype.hasOwnProperty.call(OPS, op)) {
        throw new FilterSyntaxError("expected =, !=, >, >=, <, <= or 'in' after " + f + ", got " + pyRepr(op));
      }
      const [vkind, raw] = this.valueToken();
      const v = value(vkind, raw);
      if (op === "=" && vkind === "word" && raw.endsWith("*")) return [f, "Glob", raw];
      return [f, OPS[op], v];
    }
    name() {
      const [kind, tok] = this.take();
      if (kind !== "word") throw new FilterSyntaxError("expected a field name, got " + pyRepr(tok));
      return tok;
    }
    valueToken() {
      const [kind, tok] = this.take();
      if (kind === "op") throw new FilterSyntaxError("expected a value, got " + pyRepr(tok));
      return [kind, tok];
    }
  }

  // The `where` expression a filter stands for (throws FilterSyntaxError).
  function parseWhere(text) {
    const p = new Parser(text);
    if (p.peek() === null) throw new FilterSyntaxError("the filter is empty");
    const out = p.expr();
    if (p.peek() !== null) {
      throw new FilterSyntaxError("unexpected " + pyRepr(p.peek()[1]) + " after a complete filter");
    }
    return out;
  }

  // An expression as JSON text: JSON.stringify cannot write a BigInt, and must not turn an
  // infinite number (1e999) into null, which would ask for something else.
  function whereJSON(expr) {
    if (Array.isArray(expr)) return "[" + expr.map(whereJSON).join(",") + "]";
    if (typeof expr === "bigint") return expr.toString();
    if (typeof expr === "number" && !Number.isFinite(expr)) {
      throw new FilterSyntaxError("a number in the filter is too large for JSON");
    }
    return JSON.stringify(expr);
  }

  // Python's datetime.fromisoformat, as far as RFC 3339 and ISO 8601 calendar times go:
  // YYYY-MM-DD (or YYYYMMDD), then T, t or a space and HH[:MM[:SS[.fraction]]] (or without
  // the colons), then an offset +HH[:MM[:SS[.ffffff]]] (the CLI reads Z as +00:00 first).
  // Python takes more (week dates, any separator); the console does not need them.
  const ISO = /^([0-9]{4})-?([0-9]{2})-?([0-9]{2})(?:[Tt ]([0-9]{2})(?::?([0-9]{2})(?::?([0-9]{2})(?:[.,]([0-9]+))?)?)?([+-][0-9]{2}(?::?[0-9]{2}(?::?[0-9]{2}(?:\.[0-9]{1,6})?)?)?)?)?$/;
  const OFFSET = /^([+-])([0-9]{2}):?([0-9]{2})?:?([0-9]{2})?(?:\.([0-9]{1,6}))?$/;

  function notATime(text) {
    return new FilterSyntaxError(pyRepr(text) + " is not a duration (10m, 2h, 1d), an RFC 3339 time or epoch ms");
  }

  const micros = (frac) => (frac ? Number(frac.slice(0, 6).padEnd(6, "0")) : 0);

  // Epoch ms of --since/--until text: a duration ago, RFC 3339, or epoch ms.
  function parseTime(text, nowMs) {
    text = strip(text);
    const dur = /^([0-9]+)(ms|s|m|h|d)$/.exec(text);
    if (dur) return Math.max(0, nowMs - Number(dur[1]) * UNITS[dur[2]]);
    if (/^[0-9]+$/.test(text)) return Number(text);
    const m = ISO.exec(text.replaceAll("Z", "+00:00"));
    if (!m) throw notATime(text);
    const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])];
    const [hour, minute, second] = [Number(m[4] || 0), Number(m[5] || 0), Number(m[6] || 0)];
    const days = new Date(Date.UTC(2000, month, 0)).getUTCDate();  // a leap year's month
    const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
    if (year < 1 || month < 1 || month > 12 || day < 1 || day > (month === 2 && !leap ? 28 : days)
        || hour > 23 || minute > 59 || second > 59) throw notATime(text);
    if (!m[8]) throw new FilterSyntaxError(pyRepr(text) + " needs a time zone (e.g. Z)");
    const off = OFFSET.exec(m[8]);
    const offHours = Number(off[2]), offMinutes = Number(off[3] || 0), offSeconds = Number(off[4] || 0);
    if (offHours > 23 || offMinutes > 59 || offSeconds > 59) throw notATime(text);
    const offsetUs = (off[1] === "-" ? -1 : 1)
      * (((offHours * 60 + offMinutes) * 60 + offSeconds) * 1e6 + micros(off[5]));
    const utc = new Date(0);
    utc.setUTCFullYear(year, month - 1, day);  // Date.UTC would read years 0-99 as 1900-1999
    utc.setUTCHours(hour, minute, second, 0);
    const us = utc.getTime() * 1000 + micros(m[7]) - offsetUs;
    return Math.trunc(us / 1000) || 0;  // never -0
  }

  const api = { FilterSyntaxError, parseTime, parseWhere, pyRepr, whereJSON };
  if (typeof module === "object" && module.exports) module.exports = api;
  else root.TopicsFilters = api;
})(typeof globalThis === "object" ? globalThis : this);
