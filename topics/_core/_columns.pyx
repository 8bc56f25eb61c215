# cython: language_level=3
"""Compiled diff-page column builder (``topics._core._columns``); ``_columns_pure`` is its
oracle and ``_columns.pyi`` documents the interface.

``record_columns`` turns a diff page's ``records`` array, exactly as the engine renders
it (``SegmentBuffer.render``) and as the HTTP diff route sends it, into Arrow-layout
buffers: int64 values for ``$seq``/``$ts``, and validity + int32 offsets + one values
buffer for ``$node``/``$tag``/``data``/``meta``. The caller wraps them with
``pyarrow.Array.from_buffers``; no Python object is made per record.

Rules:
1. One pass over the bytes, without the GIL, into malloc'd growable buffers; each output
   buffer becomes one bytes object at the end (one copy, sized exactly).
2. ``data``/``meta`` are copied verbatim (the stored JSON text); ``$node``/``$tag`` are
   JSON strings, unescaped to UTF-8 (the renderer escapes only quotes, backslashes and
   control characters, but any RFC 8259 escape is accepted).
3. Values are skipped, not validated: the engine validated them when they were written.
   Only the structure the parser needs is checked (brackets, quotes, integers), and a
   fault raises ValueError naming the byte offset.
4. A record whose ``$seq`` exceeds ``hi`` ends the parse (diff pages are in seq order):
   it and everything after it are left out, and ``end`` is its offset.
5. ``WANT_LINES`` also writes the data texts as JSON lines (one per record, ``\\n``
   after each) for a JSON reader; a raw CR or LF inside a data text can only be
   whitespace between tokens (JSON strings escape them), so it becomes a space. A data
   text that is not an object (or is missing) is written as ``{}``: a JSON-lines reader
   expects objects (pyarrow's crashes on a block of only ``null``), and the caller
   tells those records apart by their data text.

All byte indexing is through raw pointers guarded by explicit ``pos < n`` tests, so the
module sets no boundscheck or wraparound directives of its own.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport INT64_MAX, int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcmp, memcpy, memset, strcmp

__all__ = [
    "KIND_BOOL",
    "KIND_FLOAT",
    "KIND_INT",
    "KIND_STRING",
    "KIND_TEXT",
    "WANT_ALL",
    "WANT_DATA",
    "WANT_LINES",
    "WANT_META",
    "WANT_NODE",
    "WANT_TAG",
    "data_fields",
    "record_columns",
]

WANT_NODE = 1
WANT_TAG = 2
WANT_DATA = 4
WANT_META = 8
WANT_LINES = 16
WANT_ALL = 15

cdef enum:
    C_NODE = 0
    C_TAG = 1
    C_DATA = 2
    C_META = 3
    N_TEXT = 4

cdef struct Out:
    char *p
    Py_ssize_t len
    Py_ssize_t cap

cdef struct Text:
    Out valid   # one bit per record, LSB first (Arrow)
    Out offs    # int32 per record + 1
    Out vals
    Py_ssize_t nulls

cdef struct State:
    const unsigned char *b
    Py_ssize_t n
    Py_ssize_t err_pos
    const char *err
    Py_ssize_t rows
    int want
    Out seq
    Out ts
    Out lines
    Text text[N_TEXT]


cdef inline int _grow(Out *o, Py_ssize_t extra) noexcept nogil:
    if o.len + extra <= o.cap:
        return 0
    return _grow_slow(o, extra)


cdef int _grow_slow(Out *o, Py_ssize_t extra) noexcept nogil:
    cdef Py_ssize_t cap
    cdef char *p
    cap = max(o.len + extra, o.cap * 2, 4096)
    p = <char *>realloc(o.p, cap)
    if p == NULL:
        return -1
    o.p, o.cap = p, cap
    return 0


cdef inline int _put(Out *o, const void *src, Py_ssize_t size) noexcept nogil:
    if _grow(o, size) < 0:
        return -1
    memcpy(o.p + o.len, src, size)
    o.len += size
    return 0


cdef inline Py_ssize_t _ws(const unsigned char *b, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    while pos < n and (b[pos] == 0x20 or b[pos] == 0x0A or b[pos] == 0x0D or b[pos] == 0x09):
        pos += 1
    return pos


cdef inline Py_ssize_t _fail(State *s, const char *why, Py_ssize_t pos) noexcept nogil:
    if s.err == NULL:
        s.err, s.err_pos = why, pos
    return -1


cdef Py_ssize_t _string_end(State *s, Py_ssize_t pos) noexcept nogil:
    """Offset after the string whose opening quote is at ``pos``."""
    cdef const unsigned char *b = s.b
    pos += 1
    while pos < s.n:
        if b[pos] == 0x22:
            return pos + 1
        pos += 2 if b[pos] == 0x5C else 1
    return _fail(s, "unterminated string", pos)


# Byte classes for _skip: 1 a quote, 2 an opening bracket, 3 a closing one, 4 a
# backslash, 0 anything else (all that a container's inside needs told apart).
cdef unsigned char _SKIP[256]


cdef void _init_skip() noexcept:
    cdef int i
    for i in range(256):
        _SKIP[i] = 0
    _SKIP[0x22] = 1
    _SKIP[0x7B] = 2
    _SKIP[0x5B] = 2
    _SKIP[0x7D] = 3
    _SKIP[0x5D] = 3
    _SKIP[0x5C] = 4


_init_skip()


cdef Py_ssize_t _skip(State *s, Py_ssize_t pos) noexcept nogil:
    """Offset after the JSON value at ``pos`` (rule 3: structure only). A container is
    walked with one table lookup per byte: only quotes, brackets and, inside strings,
    backslashes matter (the value was validated when it was written)."""
    cdef const unsigned char *b = s.b
    cdef Py_ssize_t n = s.n, depth = 1
    cdef unsigned char ch, k
    if pos >= n:
        return _fail(s, "unexpected end of records", pos)
    ch = b[pos]
    if ch == 0x22:
        return _string_end(s, pos)
    if ch != 0x7B and ch != 0x5B:  # a number or a literal: up to a delimiter
        while pos < n and not (b[pos] == 0x2C or b[pos] == 0x7D or b[pos] == 0x5D
                               or b[pos] == 0x20 or b[pos] == 0x0A or b[pos] == 0x0D
                               or b[pos] == 0x09):
            pos += 1
        return pos
    pos += 1
    while pos < n:
        k = _SKIP[b[pos]]
        if k == 0:
            pos += 1
        elif k == 1:
            pos += 1
            while pos < n:  # inside a string
                k = _SKIP[b[pos]]
                if k == 1:
                    break
                pos += 2 if k == 4 else 1
            pos += 1
        elif k == 2:
            depth += 1
            pos += 1
        elif k == 3:
            depth -= 1
            pos += 1
            if depth == 0:
                return pos
        else:
            pos += 1
    return _fail(s, "unexpected end of records", pos)


cdef Py_ssize_t _int(State *s, Py_ssize_t pos, int64_t *out) noexcept nogil:
    cdef const unsigned char *b = s.b
    cdef bint neg = False
    cdef int64_t v = 0
    cdef Py_ssize_t first
    if pos < s.n and b[pos] == 0x2D:
        neg = True
        pos += 1
    first = pos
    while pos < s.n and 0x30 <= b[pos] <= 0x39:
        v = v * 10 + (b[pos] - 0x30)
        pos += 1
    if pos == first:
        return _fail(s, "expected an integer", pos)
    out[0] = -v if neg else v
    return pos


cdef inline unsigned int _hex4(const unsigned char *p) noexcept nogil:
    cdef unsigned int v = 0, d
    cdef int k
    for k in range(4):
        d = p[k]
        if 0x30 <= d <= 0x39:
            d -= 0x30
        elif 0x61 <= d <= 0x66:
            d -= 0x57
        elif 0x41 <= d <= 0x46:
            d -= 0x37
        else:
            return 0x10000
        v = (v << 4) | d
    return v


cdef int _put_utf8(Out *o, unsigned int u) noexcept nogil:
    cdef unsigned char tmp[4]
    cdef Py_ssize_t k
    if u < 0x80:
        tmp[0] = u
        k = 1
    elif u < 0x800:
        tmp[0], tmp[1] = 0xC0 | (u >> 6), 0x80 | (u & 0x3F)
        k = 2
    elif u < 0x10000:
        tmp[0], tmp[1], tmp[2] = 0xE0 | (u >> 12), 0x80 | ((u >> 6) & 0x3F), 0x80 | (u & 0x3F)
        k = 3
    else:
        tmp[0], tmp[1] = 0xF0 | (u >> 18), 0x80 | ((u >> 12) & 0x3F)
        tmp[2], tmp[3] = 0x80 | ((u >> 6) & 0x3F), 0x80 | (u & 0x3F)
        k = 4
    return _put(o, tmp, k)


cdef Py_ssize_t _string(State *s, Py_ssize_t pos, Out *o) noexcept nogil:
    """Unescape the string at ``pos`` into ``o`` (rule 2); offset after it. A lone
    surrogate escape becomes U+FFFD (Arrow strings must be valid UTF-8)."""
    cdef const unsigned char *b = s.b
    cdef Py_ssize_t end = _string_end(s, pos), run
    cdef unsigned int u, low
    cdef unsigned char ch
    if end < 0:
        return -1
    pos += 1
    end -= 1  # the closing quote
    while pos < end:
        run = pos
        while run < end and b[run] != 0x5C:
            run += 1
        if _put(o, b + pos, run - pos) < 0:
            return _fail(s, "out of memory", pos)
        pos = run
        if pos >= end:
            break
        ch = b[pos + 1] if pos + 1 < end else 0
        if ch == 0x75:
            if pos + 6 > end:
                return _fail(s, "invalid escape", pos)
            u = _hex4(b + pos + 2)
            if u == 0x10000:
                return _fail(s, "invalid escape", pos)
            pos += 6
            if 0xD800 <= u <= 0xDBFF and pos + 6 <= end and b[pos] == 0x5C and b[pos + 1] == 0x75:
                low = _hex4(b + pos + 2)
                if 0xDC00 <= low <= 0xDFFF:
                    u = 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00)
                    pos += 6
            if 0xD800 <= u <= 0xDFFF:
                u = 0xFFFD
        else:
            if ch == 0x22 or ch == 0x5C or ch == 0x2F:
                u = ch
            elif ch == 0x62:
                u = 0x08
            elif ch == 0x66:
                u = 0x0C
            elif ch == 0x6E:
                u = 0x0A
            elif ch == 0x72:
                u = 0x0D
            elif ch == 0x74:
                u = 0x09
            else:
                return _fail(s, "invalid escape", pos)
            pos += 2
        if _put_utf8(o, u) < 0:
            return _fail(s, "out of memory", pos)
    return end + 1


cdef inline int _close_text(State *s, Text *t, bint present) noexcept nogil:
    """End record ``s.rows``'s value in ``t``: its end offset and validity bit."""
    cdef int32_t off = <int32_t>t.vals.len
    cdef Py_ssize_t row = s.rows
    if _put(&t.offs, &off, 4) < 0:
        return -1
    if row % 8 == 0:
        if _grow(&t.valid, 1) < 0:
            return -1
        t.valid.p[t.valid.len] = 0
        t.valid.len += 1
    if present:
        t.valid.p[row // 8] |= <char>(1 << (row % 8))
    else:
        t.nulls += 1
    return 0


cdef Py_ssize_t _record(State *s, Py_ssize_t pos, int64_t hi) noexcept nogil:
    """Parse the record object at ``pos`` into the columns; return the offset after it,
    -1 on a fault, -2 when its seq is above ``hi`` (rule 4; nothing of it is kept)."""
    cdef const unsigned char *b = s.b
    cdef Py_ssize_t n = s.n, key, key_end, end, k, j
    cdef Py_ssize_t mark_vals[N_TEXT]
    cdef Py_ssize_t mark_lines = s.lines.len
    cdef bint present[N_TEXT]
    cdef int64_t seq = 0, ts = 0
    cdef bint has_seq = False
    cdef int col
    cdef Text *t
    for col in range(N_TEXT):
        present[col] = False
        mark_vals[col] = s.text[col].vals.len
    pos = _ws(b, pos + 1, n)
    if pos < n and b[pos] == 0x7D:
        return _fail(s, "a record has no $seq", pos)
    while True:
        if pos >= n or b[pos] != 0x22:
            return _fail(s, "expected a key", pos)
        key = pos + 1
        key_end = _string_end(s, pos)
        if key_end < 0:
            return -1
        pos = _ws(b, key_end, n)
        if pos >= n or b[pos] != 0x3A:
            return _fail(s, "expected ':'", pos)
        pos = _ws(b, pos + 1, n)
        if pos >= n:
            return _fail(s, "unexpected end of records", pos)
        k = key_end - 1 - key
        col = -1
        if k == 4 and memcmp(b + key, b"$seq", 4) == 0:
            pos = _int(s, pos, &seq)
            has_seq = True
        elif k == 3 and memcmp(b + key, b"$ts", 3) == 0:
            pos = _int(s, pos, &ts)
        else:
            if k == 4:
                if memcmp(b + key, b"data", 4) == 0:
                    col = C_DATA
                elif memcmp(b + key, b"$tag", 4) == 0:
                    col = C_TAG
                elif memcmp(b + key, b"meta", 4) == 0:
                    col = C_META
            elif k == 5 and memcmp(b + key, b"$node", 5) == 0:
                col = C_NODE
            if col >= 0 and not s.want & (1 << col):
                col = -1
            if col < 0:
                pos = _skip(s, pos)
            elif b[pos] == 0x6E and pos + 4 <= n and b[pos + 1] == 0x75 and col != C_DATA:
                pos += 4  # JSON null: SQL NULL (data keeps the text "null")
            elif col == C_NODE or col == C_TAG:
                if b[pos] != 0x22:
                    return _fail(s, "expected a string", pos)
                s.text[col].vals.len = mark_vals[col]  # a repeated key: the last wins
                pos = _string(s, pos, &s.text[col].vals)
                present[col] = pos >= 0
            else:
                end = _skip(s, pos)
                if end < 0:
                    return -1
                t = &s.text[col]
                t.vals.len = mark_vals[col]
                if _put(&t.vals, b + pos, end - pos) < 0:
                    return _fail(s, "out of memory", pos)
                present[col] = True
                if col == C_DATA and s.want & 16 and b[pos] != 0x7B:
                    s.lines.len = mark_lines  # not an object: an empty one (rule 5)
                    if _put(&s.lines, b"{}\n", 3) < 0:
                        return _fail(s, "out of memory", pos)
                elif col == C_DATA and s.want & 16:
                    s.lines.len = mark_lines
                    if _grow(&s.lines, end - pos + 1) < 0:
                        return _fail(s, "out of memory", pos)
                    for j in range(pos, end):  # rule 5
                        s.lines.p[s.lines.len] = (
                            0x20 if b[j] == 0x0A or b[j] == 0x0D else <char>b[j]
                        )
                        s.lines.len += 1
                    s.lines.p[s.lines.len] = 0x0A
                    s.lines.len += 1
                pos = end
        if pos < 0:
            return -1
        pos = _ws(b, pos, n)
        if pos < n and b[pos] == 0x2C:
            pos = _ws(b, pos + 1, n)
            continue
        if pos < n and b[pos] == 0x7D:
            break
        return _fail(s, "expected ',' or '}'", pos)
    if not has_seq:
        return _fail(s, "a record has no $seq", pos)
    if hi >= 0 and seq > hi:
        for col in range(N_TEXT):
            s.text[col].vals.len = mark_vals[col]
        s.lines.len = mark_lines
        return -2
    if _put(&s.seq, &seq, 8) < 0 or _put(&s.ts, &ts, 8) < 0:
        return _fail(s, "out of memory", pos)
    for col in range(N_TEXT):
        if s.want & (1 << col):
            if _close_text(s, &s.text[col], present[col]) < 0:
                return _fail(s, "out of memory", pos)
    if s.want & 16 and not present[C_DATA]:
        if _put(&s.lines, b"{}\n", 3) < 0:
            return _fail(s, "out of memory", pos)
    s.rows += 1
    return pos + 1


cdef Py_ssize_t _array(State *s, Py_ssize_t pos, int64_t hi) noexcept nogil:
    """Parse the records array at ``pos``; return the offset after it (or of the first
    record above ``hi``), -1 on a fault."""
    cdef const unsigned char *b = s.b
    cdef Py_ssize_t n = s.n, end
    pos = _ws(b, pos, n)
    if pos >= n or b[pos] != 0x5B:
        return _fail(s, "expected '['", pos)
    pos = _ws(b, pos + 1, n)
    if pos < n and b[pos] == 0x5D:
        return pos + 1
    while True:
        if pos >= n or b[pos] != 0x7B:
            return _fail(s, "expected a record object", pos)
        end = _record(s, pos, hi)
        if end == -2:
            return pos
        if end < 0:
            return -1
        pos = _ws(b, end, n)
        if pos < n and b[pos] == 0x2C:
            pos = _ws(b, pos + 1, n)
            continue
        if pos < n and b[pos] == 0x5D:
            return pos + 1
        return _fail(s, "expected ',' or ']'", pos)


cdef object _bytes(Out *o):
    if o.p == NULL:
        return b""
    return PyBytes_FromStringAndSize(o.p, o.len)


def record_columns(buf, Py_ssize_t start=0, long long hi=-1, int want=WANT_ALL):
    """Split the records array at ``buf[start:]`` into column buffers; see _columns.pyi."""
    cdef Py_buffer view
    cdef State s
    cdef Py_ssize_t end
    cdef int col
    cdef int32_t zero = 0
    memset(&s, 0, sizeof(State))
    s.want = want
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if start < 0 or start > view.len:
            raise ValueError(f"start {start} is outside the buffer")
        s.b, s.n = <const unsigned char *>view.buf, view.len
        for col in range(N_TEXT):
            if want & (1 << col) and _put(&s.text[col].offs, &zero, 4) < 0:
                raise MemoryError()
        # The buffer is held by ``view`` and nothing else runs meanwhile: safe without the GIL.
        with nogil:
            end = _array(&s, start, hi)
        if end < 0:
            if strcmp(s.err, b"out of memory") == 0:
                raise MemoryError()
            raise ValueError(f"malformed diff records: {s.err.decode()} at byte {s.err_pos}")
        columns = {"seq": (None, _bytes(&s.seq)), "ts": (None, _bytes(&s.ts))}
        for col, name in enumerate(("node", "tag", "data", "meta")):
            if want & (1 << col):
                t = &s.text[col]
                columns[name] = (
                    _bytes(&t.valid) if t.nulls else None,
                    _bytes(&t.offs),
                    _bytes(&t.vals),
                    t.nulls,
                )
        if want & WANT_LINES:
            columns["lines"] = _bytes(&s.lines)
        return s.rows, end, columns
    finally:
        PyBuffer_Release(&view)
        free(s.seq.p)
        free(s.ts.p)
        free(s.lines.p)
        for col in range(N_TEXT):
            free(s.text[col].valid.p)
            free(s.text[col].offs.p)
            free(s.text[col].vals.p)


include "_columns_fields.pxi"
