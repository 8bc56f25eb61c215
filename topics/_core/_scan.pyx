# cython: language_level=3
"""Compiled write-body splitter (``topics._core._scan``); ``_scan_pure`` is its oracle.

``split_write_body`` splits an HTTP write body into its records and its other top-level
fields in one pass, handing each record's ``data``/``meta`` back as the exact bytes of
their JSON text (never parsed and re-dumped), and checking the whole body is strict
JSON on the way. ``_scan.pyi`` documents the interface and ``_scan_pure``'s docstring the
rules; results and errors (problem, path, offset) must match ``_scan_pure`` exactly.

How it is built:
- The byte loops are ``noexcept nogil`` functions over a ``const unsigned char*`` into
  the body's bytes object (which the caller keeps alive). They report an error by
  storing a code and an offset in the ``Cur`` cursor and returning -1; the GIL-holding
  driver above them turns that into a BodyError with the path it knows.
- All byte indexing is through raw pointers guarded by explicit ``pos < n`` tests, so
  Cython's bounds checks never apply to it and the module sets no boundscheck or
  wraparound directives of its own. setup.py turns both off for release builds; that
  touches only the tuple lookups ``_PROBLEMS[code]`` and ``_KEYS[kind]``, whose indexes
  come from the enums below and are always in range.
- Python objects are made only for the output: one dict per record, bytes for
  data/meta, decoded values for the rest. Only errors build path strings.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.float cimport PyFloat_FromString
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.number cimport PyNumber_Long
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcmp

import json
import re

import ujson

__all__ = ["MAX_DEPTH", "BodyError", "split_write_body"]


cdef extern from "Python.h":
    object PyUnicode_FromKindAndData(int kind, const void *buffer, Py_ssize_t size)
    int PyUnicode_4BYTE_KIND
    object PyLong_FromLongLong(long long v)


cdef enum:
    DEPTH_LIMIT = 512
    SMALL_TEXT = 128  # code points decoded on the C stack before falling back to the heap

MAX_DEPTH = DEPTH_LIMIT

cdef enum:
    # Error codes: indexes into _PROBLEMS (0 = no error).
    E_EOF = 1
    E_VALUE
    E_NUMBER
    E_LITERAL
    E_ESCAPE
    E_CONTROL
    E_UTF8
    E_KEY
    E_COLON
    E_OBJECT_END
    E_ARRAY_END
    E_DEPTH
    E_TRAILING
    E_NOT_OBJECT
    E_RECORDS
    E_RECORD
    E_DECODE

# Same texts as _scan_pure (the tests compare messages across implementations).
_PROBLEMS = (
    None,
    "unexpected end of body",
    "expected a JSON value",
    "invalid number",
    "invalid literal",
    "invalid escape in string",
    "unescaped control character in string",
    "invalid UTF-8",
    "expected a string key",
    "expected ':'",
    "expected ',' or '}'",
    "expected ',' or ']'",
    "nesting deeper than 512",
    "unexpected data after the body",
    "the body must be a JSON object",
    "records must be an array",
    "a record must be a JSON object",
    "value cannot be decoded",
)

cdef enum:
    # What a member key names.
    K_OTHER = 0
    K_DATA
    K_META
    K_TAG
    K_NODE
    K_RECORDS

# Indexed by K_*: the dict keys used for known members, shared across records.
cdef tuple _KEYS = (None, "data", "meta", "tag", "node", "records")

# _FAIL is what _value returns instead of raising, so its caller can name the path.
cdef object _FAIL = object()

cdef struct Cur:
    const unsigned char *buf  # the body; the bytes object stays alive in the caller
    Py_ssize_t n
    int err                   # an E_* code once a scan failed
    Py_ssize_t err_pos

# Byte classes inside a string: 0 plain ASCII, 1 '"', 2 '\\', 3 control, 4 >= 0x80.
cdef unsigned char _SCLASS[256]
# Hex digit values, 0xFF for other bytes.
cdef unsigned char _HEXV[256]
# What the one-letter escapes stand for (0 = not an escape letter).
cdef unsigned char _UNESC[256]


cdef void _init_tables() noexcept:
    cdef int i
    for i in range(256):
        _SCLASS[i] = 3 if i < 0x20 else (4 if i >= 0x80 else 0)
        _HEXV[i] = 0xFF
        _UNESC[i] = 0
    _SCLASS[0x22] = 1
    _SCLASS[0x5C] = 2
    for i in range(10):
        _HEXV[0x30 + i] = i
    for i in range(6):
        _HEXV[0x41 + i] = 10 + i
        _HEXV[0x61 + i] = 10 + i
    _UNESC[0x22] = 0x22
    _UNESC[0x5C] = 0x5C
    _UNESC[0x2F] = 0x2F
    _UNESC[0x62] = 0x08
    _UNESC[0x66] = 0x0C
    _UNESC[0x6E] = 0x0A
    _UNESC[0x72] = 0x0D
    _UNESC[0x74] = 0x09


_init_tables()


class BodyError(ValueError):
    """A write body that cannot be split: ``path`` names where ("$", "$.records[3].data",
    '$["odd key"]'), ``offset`` is the byte offset in the body, ``problem`` says what."""

    def __init__(self, problem, path="$", offset=0):
        super().__init__(f"{problem} at {path} (byte {offset})")
        self.problem = problem
        self.path = path
        self.offset = offset

    def __reduce__(self):
        return (type(self), (self.problem, self.path, self.offset))


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def member_path(parent, key):
    """``parent.key``, or ``parent["key"]`` when the key is not a plain ASCII identifier."""
    if _IDENT.match(key):
        return f"{parent}.{key}"
    return f"{parent}[{json.dumps(key)}]"


cdef inline str _record_path(Py_ssize_t index):
    return f"$.records[{index}]"


cdef object _error(Cur *c, object path):
    return BodyError(_PROBLEMS[c.err], path, c.err_pos)


# --- byte loops (no GIL, no Python objects) -------------------------------------------


cdef inline Py_ssize_t _fail(Cur *c, int code, Py_ssize_t pos) noexcept nogil:
    c.err = code
    c.err_pos = pos
    return -1


cdef inline Py_ssize_t _ws(const unsigned char *b, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    cdef unsigned char ch
    while pos < n:
        ch = b[pos]
        if ch != 0x20 and ch != 0x0A and ch != 0x0D and ch != 0x09:
            break
        pos += 1
    return pos


cdef inline Py_ssize_t _utf8(Cur *c, Py_ssize_t pos) noexcept nogil:
    """Check the multi-byte sequence leading at ``pos``; return the offset after it.

    Strict like bytes.decode (Unicode table 3-7): no overlongs, no encoded surrogates,
    nothing above U+10FFFF. Any fault, a truncated sequence included, is blamed on the
    lead byte, which is where bytes.decode reports it too.
    """
    cdef const unsigned char *b = c.buf
    cdef unsigned char c0 = b[pos]
    cdef unsigned char lo = 0x80, hi = 0xBF
    cdef Py_ssize_t more, k
    if 0xC2 <= c0 <= 0xDF:
        more = 1
    elif c0 == 0xE0:
        more = 2
        lo = 0xA0
    elif c0 == 0xED:
        more = 2
        hi = 0x9F
    elif 0xE1 <= c0 <= 0xEF:
        more = 2
    elif c0 == 0xF0:
        more = 3
        lo = 0x90
    elif c0 == 0xF4:
        more = 3
        hi = 0x8F
    elif 0xF1 <= c0 <= 0xF3:
        more = 3
    else:
        return _fail(c, E_UTF8, pos)
    if pos + more >= c.n or not lo <= b[pos + 1] <= hi:
        return _fail(c, E_UTF8, pos)
    for k in range(2, more + 1):
        if not 0x80 <= b[pos + k] <= 0xBF:
            return _fail(c, E_UTF8, pos)
    return pos + more + 1


cdef Py_ssize_t _string(Cur *c, Py_ssize_t pos, int *esc) noexcept nogil:
    """Check the string whose quote is at ``pos``; return the offset after its closing
    quote. Sets ``esc[0]`` when the string holds a backslash escape."""
    cdef const unsigned char *b = c.buf
    cdef Py_ssize_t n = c.n, j
    cdef unsigned char k, ch
    pos += 1
    while True:
        while pos < n and _SCLASS[b[pos]] == 0:
            pos += 1
        if pos >= n:
            return _fail(c, E_EOF, n)
        k = _SCLASS[b[pos]]
        if k == 1:
            return pos + 1
        if k == 2:
            esc[0] = 1
            if pos + 1 >= n:
                return _fail(c, E_EOF, n)
            ch = b[pos + 1]
            if ch == 0x75:  # \uXXXX
                for j in range(pos + 2, pos + 6):
                    if j >= n:
                        return _fail(c, E_EOF, n)
                    if _HEXV[b[j]] == 0xFF:
                        return _fail(c, E_ESCAPE, j)
                pos += 6
            elif _UNESC[ch]:
                pos += 2
            else:
                return _fail(c, E_ESCAPE, pos + 1)
        elif k == 3:
            return _fail(c, E_CONTROL, pos)
        else:
            pos = _utf8(c, pos)
            if pos < 0:
                return -1


cdef inline Py_ssize_t _digits(Cur *c, Py_ssize_t pos) noexcept nogil:
    """At least one digit at ``pos``; return the offset after the run."""
    cdef const unsigned char *b = c.buf
    cdef Py_ssize_t n = c.n
    if pos >= n:
        return _fail(c, E_EOF, n)
    if not 0x30 <= b[pos] <= 0x39:
        return _fail(c, E_NUMBER, pos)
    pos += 1
    while pos < n and 0x30 <= b[pos] <= 0x39:
        pos += 1
    return pos


cdef Py_ssize_t _number(Cur *c, Py_ssize_t pos, int *is_float) noexcept nogil:
    """Check the number at ``pos`` (a '-' or a digit); return the offset after it."""
    cdef const unsigned char *b = c.buf
    cdef Py_ssize_t n = c.n
    if b[pos] == 0x2D:
        pos += 1
    if pos < n and b[pos] == 0x30:
        pos += 1
        if pos < n and 0x30 <= b[pos] <= 0x39:
            return _fail(c, E_NUMBER, pos)  # a leading zero
    else:
        pos = _digits(c, pos)
        if pos < 0:
            return -1
    if pos < n and b[pos] == 0x2E:
        is_float[0] = 1
        pos = _digits(c, pos + 1)
        if pos < 0:
            return -1
    if pos < n and (b[pos] == 0x65 or b[pos] == 0x45):
        is_float[0] = 1
        pos += 1
        if pos < n and (b[pos] == 0x2B or b[pos] == 0x2D):
            pos += 1
        pos = _digits(c, pos)
    return pos


cdef Py_ssize_t _literal(Cur *c, Py_ssize_t pos) noexcept nogil:
    """Check the true/false/null whose first letter is at ``pos``."""
    cdef const char *word
    cdef Py_ssize_t size, k
    if c.buf[pos] == 0x74:
        word, size = b"true", 4
    elif c.buf[pos] == 0x66:
        word, size = b"false", 5
    else:
        word, size = b"null", 4
    for k in range(1, size):
        if pos + k >= c.n:
            return _fail(c, E_EOF, c.n)
        if c.buf[pos + k] != <unsigned char>word[k]:
            return _fail(c, E_LITERAL, pos + k)
    return pos + size


cdef Py_ssize_t _key(Cur *c, Py_ssize_t pos, Py_ssize_t *key_end, int *esc) noexcept nogil:
    """Check ``"key" :`` at ``pos``; return the offset of the member's value. The key's
    quotes are at ``pos`` and ``key_end[0] - 1``."""
    cdef const unsigned char *b = c.buf
    cdef Py_ssize_t n = c.n
    if pos >= n:
        return _fail(c, E_EOF, n)
    if b[pos] != 0x22:
        return _fail(c, E_KEY, pos)
    pos = _string(c, pos, esc)
    if pos < 0:
        return -1
    key_end[0] = pos
    pos = _ws(b, pos, n)
    if pos >= n:
        return _fail(c, E_EOF, n)
    if b[pos] != 0x3A:
        return _fail(c, E_COLON, pos)
    return _ws(b, pos + 1, n)


cdef Py_ssize_t _skip(Cur *c, Py_ssize_t pos) noexcept nogil:
    """Check the value at ``pos``; return the offset after it. Iterative, with the open
    brackets on a fixed C stack, so nesting costs no recursion."""
    cdef const unsigned char *b = c.buf
    cdef Py_ssize_t n = c.n, key_end
    cdef unsigned char stack[DEPTH_LIMIT]
    cdef int depth = 0, esc = 0, is_float = 0
    cdef unsigned char ch, top
    while True:
        if pos >= n:
            return _fail(c, E_EOF, n)
        ch = b[pos]
        if ch == 0x7B or ch == 0x5B:
            if depth >= DEPTH_LIMIT:
                return _fail(c, E_DEPTH, pos)
            stack[depth] = ch
            depth += 1
            pos = _ws(b, pos + 1, n)
            if pos >= n:
                return _fail(c, E_EOF, n)
            if b[pos] != ch + 2:  # not "{}" / "[]": a member or element follows
                if ch == 0x7B:
                    pos = _key(c, pos, &key_end, &esc)
                    if pos < 0:
                        return -1
                continue
            depth -= 1
            pos += 1
        elif ch == 0x22:
            pos = _string(c, pos, &esc)
        elif ch == 0x2D or 0x30 <= ch <= 0x39:
            pos = _number(c, pos, &is_float)
        elif ch == 0x74 or ch == 0x66 or ch == 0x6E:
            pos = _literal(c, pos)
        else:
            return _fail(c, E_VALUE, pos)
        if pos < 0:
            return -1
        while True:  # after a value: close containers until a "," needs a new value
            if depth == 0:
                return pos
            pos = _ws(b, pos, n)
            if pos >= n:
                return _fail(c, E_EOF, n)
            ch = b[pos]
            top = stack[depth - 1]
            if ch == 0x2C:
                pos = _ws(b, pos + 1, n)
                if top == 0x7B:
                    pos = _key(c, pos, &key_end, &esc)
                    if pos < 0:
                        return -1
                break
            if ch != top + 2:
                return _fail(c, E_OBJECT_END if top == 0x7B else E_ARRAY_END, pos)
            depth -= 1
            pos += 1


cdef inline unsigned int _hex4(const unsigned char *p) noexcept nogil:
    return (_HEXV[p[0]] << 12) | (_HEXV[p[1]] << 8) | (_HEXV[p[2]] << 4) | _HEXV[p[3]]


cdef Py_ssize_t _unescape(
    const unsigned char *p, const unsigned char *end, Py_UCS4 *out
) noexcept nogil:
    """Decode an already-checked string body [p, end) into code points; return how many.

    A high surrogate escape followed by a low one combines into one code point; any other
    surrogate escape stays a lone surrogate (what json.loads does)."""
    cdef Py_ssize_t k = 0
    cdef unsigned int u, low  # not Py_UCS4: Cython treats that as a character type
    cdef unsigned char ch
    while p < end:
        ch = p[0]
        if ch == 0x5C:
            if p[1] == 0x75:
                u = _hex4(p + 2)
                p += 6
                # The string was checked, so a backslash here has its escape after it.
                if 0xD800 <= u <= 0xDBFF and p < end and p[0] == 0x5C and p[1] == 0x75:
                    low = _hex4(p + 2)
                    if 0xDC00 <= low <= 0xDFFF:
                        u = 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00)
                        p += 6
            else:
                u = _UNESC[p[1]]
                p += 2
        elif ch < 0x80:
            u = ch
            p += 1
        elif ch < 0xE0:
            u = ((ch & 0x1F) << 6) | (p[1] & 0x3F)
            p += 2
        elif ch < 0xF0:
            u = ((ch & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F)
            p += 3
        else:
            u = ((ch & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F)
            p += 4
        out[k] = <Py_UCS4>u
        k += 1
    return k


cdef inline int _record_kind(const unsigned char *p, Py_ssize_t size) noexcept nogil:
    if size == 4:
        if memcmp(p, b"data", 4) == 0:
            return K_DATA
        if memcmp(p, b"meta", 4) == 0:
            return K_META
        if memcmp(p, b"node", 4) == 0:
            return K_NODE
    elif size == 3 and memcmp(p, b"tag", 3) == 0:
        return K_TAG
    return K_OTHER


# --- values (GIL held: these make the output objects) --------------------------------


cdef str _text(Cur *c, Py_ssize_t start, Py_ssize_t end, int esc):
    """Decode the checked string with quotes at ``start`` and ``end - 1``."""
    cdef const unsigned char *b = c.buf
    cdef Py_ssize_t size = end - start - 2, count
    cdef Py_UCS4 small[SMALL_TEXT]
    cdef Py_UCS4 *out = small
    if not esc:
        return PyUnicode_DecodeUTF8(<const char *>b + start + 1, size, NULL)
    if size > SMALL_TEXT:
        out = <Py_UCS4 *>PyMem_Malloc(size * sizeof(Py_UCS4))
        if out == NULL:
            raise MemoryError()
    try:
        count = _unescape(b + start + 1, b + end - 1, out)
        return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, out, count)
    finally:
        if out != small:
            PyMem_Free(out)


cdef object _number_value(Cur *c, Py_ssize_t start, Py_ssize_t end, int is_float):
    cdef const unsigned char *b = c.buf
    cdef bint neg = b[start] == 0x2D
    cdef Py_ssize_t i
    cdef long long v = 0
    if not is_float and end - start - neg <= 18:  # fits a long long: no bytes, no parse
        for i in range(start + neg, end):
            v = v * 10 + (b[i] - 0x30)
        return PyLong_FromLongLong(-v if neg else v)
    span = PyBytes_FromStringAndSize(<const char *>b + start, end - start)
    try:
        return PyFloat_FromString(span) if is_float else PyNumber_Long(span)
    except (ValueError, OverflowError):  # an int over Python's digit limit
        _fail(c, E_DECODE, start)
        return _FAIL


cdef object _value(Cur *c, Py_ssize_t pos, Py_ssize_t *end):
    """Check and decode the value at ``pos``, setting ``end[0]`` past it; on a fault
    return _FAIL with the error in ``c`` (the caller knows the path)."""
    cdef const unsigned char *b = c.buf
    cdef Py_ssize_t stop
    cdef int flag = 0
    cdef unsigned char ch
    if pos >= c.n:
        _fail(c, E_EOF, c.n)
        return _FAIL
    ch = b[pos]
    if ch == 0x22:
        stop = _string(c, pos, &flag)
        if stop < 0:
            return _FAIL
        end[0] = stop
        return _text(c, pos, stop, flag)
    if ch == 0x2D or 0x30 <= ch <= 0x39:
        stop = _number(c, pos, &flag)
        if stop < 0:
            return _FAIL
        end[0] = stop
        return _number_value(c, pos, stop, flag)
    if ch == 0x74 or ch == 0x66 or ch == 0x6E:
        stop = _literal(c, pos)
        if stop < 0:
            return _FAIL
        end[0] = stop
        return True if ch == 0x74 else (False if ch == 0x66 else None)
    stop = _skip(c, pos)  # a container, or a byte that starts no value
    if stop < 0:
        return _FAIL
    end[0] = stop
    try:
        return ujson.loads(PyBytes_FromStringAndSize(<const char *>b + pos, stop - pos))
    except (ValueError, OverflowError):
        _fail(c, E_DECODE, pos)
        return _FAIL


include "_scan_body.pxi"
