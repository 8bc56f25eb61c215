# cython: language_level=3
"""Compiled core of topics (``topics._core._ext``); interface and semantics in _ext.pyi.

Behaviour matches the pure-Python oracle ``_pure`` exactly (results, error fields and
messages); the tests compare the two. This module exists for speed: per-record and
per-byte work runs in C on raw pointers, with the GIL released around buffer loops that
are long enough for the release to pay off.

setup.py turns bounds/wraparound checks off for the whole module in release builds (and
on in TOPICS_CYTHON_DEBUG builds); the few places that index Python sequences say below
why the index is always in range, and no index is ever negative. Raw-pointer reads are
guarded by explicit length checks. Casts between char* and unsigned char* only change
signedness; object casts (which Cython does not check) and narrowing integer casts each
carry a comment saying why they hold.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_FillInfo, PyBuffer_Release, PyObject_GetBuffer
from cpython cimport array
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Check, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_Check, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Check, PyDict_CheckExact, PyDict_GetItemWithError
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.set cimport PyAnySet_Check
from cpython.unicode cimport PyUnicode_Check, PyUnicode_GET_LENGTH
from libc.stdint cimport UINT64_MAX, int64_t, uint16_t, uint32_t, uint64_t
from libc.math cimport isfinite
from libc.stdlib cimport calloc, free, malloc, realloc, strtod
from libc.string cimport memchr, memcmp, memcpy, memmove

cdef extern from "string.h" nogil:
    void* memmem(const void* haystack, size_t hlen, const void* needle, size_t nlen)

import array as _array
from collections.abc import Mapping

cdef array.array _U32_ARRAY = _array.array("I")

cdef extern from "Python.h":
    bint PyMemoryView_Check(object obj)
    bint PyUnicode_CheckExact(PyObject* obj)
    bint PyUnicode_IS_COMPACT_ASCII(PyObject* obj)
    Py_ssize_t PyUnicode_GET_LENGTH_P "PyUnicode_GET_LENGTH" (PyObject* obj)
    const void* PyUnicode_DATA(PyObject* obj)
    Py_ssize_t PyDict_GET_SIZE(object obj)
    int PyDict_Next(object obj, Py_ssize_t* pos, PyObject** key, PyObject** value)
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL

cdef extern from "crc32c_impl.h":
    void topics_crc32c_init() noexcept nogil
    uint32_t topics_crc32c(uint32_t crc, const void* buf, size_t n) noexcept nogil
    uint32_t topics_crc32c_sw(uint32_t crc, const void* buf, size_t n) noexcept nogil
    int topics_crc32c_hw_available() noexcept nogil

cdef extern from *:
    """
    /* CRC of a record frame: the salt, then bytes [0:4] and [8:size-1]. With SSE4.2 it is
       one pass: the 4-byte length field, 8-byte words, then a 4/2/1-byte tail instead of
       two calls finishing byte by byte. Same value as chaining topics_crc32c twice. */
    #ifdef TOPICS_CRC32C_X86
    __attribute__((target("sse4.2"))) static uint32_t topics_frame_crc_hw(
            uint32_t salt, const unsigned char *p, size_t size) {
        uint32_t w32;
        uint16_t w16;
        uint64_t w64, c;
        const unsigned char *q = p + 8;
        size_t n = size - 9;
        memcpy(&w32, p, 4);
        c = _mm_crc32_u32(~salt, w32);
        for (; n >= 8; q += 8, n -= 8) {
            memcpy(&w64, q, 8);
            c = _mm_crc32_u64(c, w64);
        }
        if (n >= 4) {
            memcpy(&w32, q, 4);
            c = _mm_crc32_u32((uint32_t)c, w32);
            q += 4;
            n -= 4;
        }
        if (n >= 2) {
            memcpy(&w16, q, 2);
            c = _mm_crc32_u16((uint32_t)c, w16);
            q += 2;
            n -= 2;
        }
        if (n) c = _mm_crc32_u8((uint32_t)c, *q);
        return ~(uint32_t)c;
    }
    #endif

    static inline uint32_t topics_frame_crc(uint32_t salt, const unsigned char *p, size_t size) {
    #ifdef TOPICS_CRC32C_X86
        if (topics_crc32c_use_hw) return topics_frame_crc_hw(salt, p, size);
    #endif
        return topics_crc32c(topics_crc32c(salt, p, 4), p + 8, size - 9);
    }
    """
    # frame_len is >= _MIN_FRAME (checked or computed by every caller).
    uint32_t topics_frame_crc(uint32_t salt, const unsigned char* p, size_t size) noexcept nogil

topics_crc32c_init()

Buffer = bytes | bytearray | memoryview

FORMAT_VERSION = 1
FRAME_HEADER_SIZE = 40
FRAME_TRAILER_SIZE = 1
KIND_RECORD = 1
FLAG_LIVE = 0
FLAG_DELETED = 1
RENDER_DATA = 1
RENDER_META = 2
RENDER_TAGS = 4

cdef enum:
    _HEADER = 40
    _MIN_FRAME = 41
    # Buffer loops release the GIL from this many bytes on. Below it the work takes
    # about a microsecond, too little for another thread to use, while every release
    # risks a wait to get the GIL back.
    _NOGIL_BYTES = 4096

# Largest data+meta limit that still keeps every frame_len within a u32.
cdef Py_ssize_t _MAX_RECORD_LIMIT = 0xFFFFFFFF - _MIN_FRAME - 2 * 0xFFFF
cdef object _MISSING = object()


class FrameError(ValueError):
    """The one error of the core: bad record input, or bytes that are not valid frames."""

    def __init__(self, message, index=-1, field="frame", reason="frame"):
        super().__init__(message)
        self.index = index
        self.field = field
        self.reason = reason

    def __reduce__(self):
        return (type(self), (str(self), self.index, self.field, self.reason))


include "_json.pxi"

# --- little-endian fields -----------------------------------------------------------
# Written byte by byte so the code is endian-neutral; compilers merge these into single
# loads and stores on little-endian targets. The narrowing casts in the stores keep the
# low byte/half on purpose; i64 fields travel as their u64 two's-complement bit pattern.


cdef inline uint16_t _ld16(const unsigned char* p) noexcept nogil:
    return p[0] | (<uint16_t>p[1] << 8)


cdef inline uint32_t _ld32(const unsigned char* p) noexcept nogil:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint64_t _ld64(const unsigned char* p) noexcept nogil:
    return _ld32(p) | (<uint64_t>_ld32(p + 4) << 32)


cdef inline void _st16(unsigned char* p, uint16_t v) noexcept nogil:
    p[0] = <unsigned char>v
    p[1] = <unsigned char>(v >> 8)


cdef inline void _st32(unsigned char* p, uint32_t v) noexcept nogil:
    _st16(p, <uint16_t>v)
    _st16(p + 2, <uint16_t>(v >> 16))


cdef inline void _st64(unsigned char* p, uint64_t v) noexcept nogil:
    _st32(p, <uint32_t>v)
    _st32(p + 4, <uint32_t>(v >> 32))


# --- buffers ------------------------------------------------------------------------


cdef int _get_buffer(object obj, Py_buffer* view) except -1:
    """A contiguous byte view of any buffer; release with PyBuffer_Release."""
    try:
        PyObject_GetBuffer(obj, view, PyBUF_SIMPLE)
    except BufferError:
        # A non-contiguous memoryview: read a contiguous copy, as _pure does. The view
        # holds the only reference to the copy, so it lives exactly as long as needed.
        PyObject_GetBuffer(memoryview(obj).tobytes(), view, PyBUF_SIMPLE)
    return 0


# --- CRC32C -------------------------------------------------------------------------


cdef inline uint32_t _crc_raw(uint32_t crc, const void* p, size_t n, bint portable) noexcept nogil:
    return topics_crc32c_sw(crc, p, n) if portable else topics_crc32c(crc, p, n)


cdef uint32_t _crc_of(object data, uint32_t crc, bint portable) except? 0:
    cdef Py_buffer view
    _get_buffer(data, &view)
    try:
        if view.len < _NOGIL_BYTES:
            crc = _crc_raw(crc, view.buf, view.len, portable)
        else:
            with nogil:
                crc = _crc_raw(crc, view.buf, view.len, portable)
    finally:
        PyBuffer_Release(&view)
    return crc


def crc32c(data, uint32_t crc=0):
    """CRC-32C (Castagnoli), chainable like zlib.crc32: crc32c(b, crc32c(a)) == crc32c(a + b)."""
    return _crc_of(data, crc, False)


def _crc32c_portable(data, uint32_t crc=0):
    """crc32c through the slicing-by-8 tables even where SSE4.2 exists (for tests)."""
    return _crc_of(data, crc, True)


_CRC32C_HARDWARE = bool(topics_crc32c_hw_available())


# --- json_check ---------------------------------------------------------------------


cdef Py_ssize_t _scan(const char* p, Py_ssize_t n, Py_ssize_t* members) noexcept:
    """_json_scan, releasing the GIL for long inputs (p must be kept alive by the caller)."""
    cdef Py_ssize_t err
    if n < _NOGIL_BYTES:
        return _json_scan(<const unsigned char*>p, n, members)
    with nogil:
        err = _json_scan(<const unsigned char*>p, n, members)
    return err


def json_check(data):
    """Check that ``data`` is exactly one JSON value; see _ext.pyi."""
    cdef Py_buffer view
    cdef Py_ssize_t members, err
    _get_buffer(data, &view)
    try:
        err = _scan(<const char*>view.buf, view.len, &members)
    finally:
        PyBuffer_Release(&view)
    if err >= 0:
        raise FrameError(f"invalid JSON at byte {err}", -1, "data", "json")
    return members


# --- encode_batch -------------------------------------------------------------------
#
# Three passes over a batch:
#   1. _fetch every record's data/meta/tag/node (new references, so a dumps() that runs
#      user code and mutates the caller's records cannot free them under us). A record
#      that is not a mapping or lacks "data" (or whose mapping raises) stops this pass;
#      its error is raised only after the records before it have been checked, since an
#      earlier record's later check (a bad tag, say) must win.
#   2. With a dumps known to write a list as "[" + ",".join(texts of each value) + "]"
#      (ujson's), encode all data values in one dumps(list) call and all dict metas in
#      another, and split each result per value (_split_array), which also runs the
#      json_check rules over every value. Per-call overhead dominates dumps() on small
#      values, so this roughly halves its cost. If the batch call raises or returns
#      something unusable, or its text does not split cleanly into one valid value per
#      element (NaN or Infinity anywhere, say), pass 3 calls dumps() once per value
#      instead: that path finds and reports the failing record exactly as before.
#      One difference remains, with ujson's __json__ hook (whose text ujson writes
#      verbatim): hook texts that are not one JSON value each but happen to line up into
#      valid elements again (say '"a' and 'b"' and '1,2') are not caught in a batch.
#   3. _check_record each record in order (data, meta, tag, node, size), then write.

# The dumps functions pass 2 is used with, matched by identity. Within ujson's output for
# a list, each value's text is exactly what ujson makes of that value alone (no indent, no
# separator spaces), so the split stores the bytes the per-record path would. Any other
# dumps goes through the per-record path, keeping exactly what it makes of each value:
# json.dumps writes ", " between elements, and indent= re-indents nested values.
cdef object _UJSON_DUMPS = None
cdef object _UJSON_ENCODE = None
try:
    import ujson as _ujson
except ImportError:  # pragma: no cover - ujson is a dependency
    pass
else:
    _UJSON_DUMPS, _UJSON_ENCODE = _ujson.dumps, _ujson.encode
    del _ujson

ctypedef struct _Limits:
    Py_ssize_t record, meta, keys, tag, node

ctypedef struct _Rec:
    const char* node
    const char* tag
    const char* meta
    const char* data
    Py_ssize_t node_len, tag_len, meta_len, data_len

cdef enum:
    _DATA = 0
    _META = 1
    _TAG = 2
    _NODE = 3

ctypedef struct _Fields:
    # New references to one record's data/meta/tag/node, indexed by _DATA.._NODE (None
    # where absent); NULL until fetched.
    PyObject* v[4]

ctypedef struct _Dumped:
    # One dumps(list) result split per value: value j's JSON is base[spans[j].start:][:size]
    # for j < valid, where valid is all of them or (no batch call made, or its text did not
    # split cleanly) 0; values from ``valid`` on go through dumps() one by one. ``next`` is
    # the index of the value pass 3 asks for next.
    const char* base
    _Span* spans
    Py_ssize_t valid, next

ctypedef struct _Node:
    # The default node's checked UTF-8, once a record has used it (size -1 before).
    const char* ptr
    Py_ssize_t size

cdef dict _REASONS = {
    "missing": "required",
    "type": "wrong type",
    "empty": "must not be empty",
    "too_large": "too large",
    "meta_keys": "too many keys",
}


cdef object _record_error(Py_ssize_t index, str field, str reason, str detail=None):
    return FrameError(detail or _REASONS[reason], index, field, reason)


cdef _Limits _parse_limits(tuple limits) except *:
    """Reject negative limits; clamp the rest to what a frame can hold."""
    cdef _Limits lim
    if len(limits) != 5:
        raise ValueError("limits must have 5 items")
    if not all(isinstance(v, int) for v in limits):
        raise TypeError("limits must be ints")
    if min(limits) < 0:
        raise ValueError("limits must be >= 0")
    lim.record = min(limits[0], _MAX_RECORD_LIMIT)
    lim.meta = min(limits[1], 0xFFFFFFFF)
    lim.keys = min(limits[2], 0xFFFFFFFF)
    lim.tag = min(limits[3], 0xFFFF)
    lim.node = min(limits[4], 0xFFFF)
    return lim


cdef inline bint _is_buffer(object value) noexcept:
    return PyBytes_Check(value) or PyByteArray_Check(value) or PyMemoryView_Check(value)


cdef inline object _raw_json(object value):
    """A bytes/bytearray/memoryview as bytes we can point into (copied unless bytes)."""
    if PyBytes_Check(value):
        return value
    return memoryview(value).tobytes()  # an immutable copy


cdef object _dumps_json(object value, Py_ssize_t index, str field, object dumps):
    """What ``dumps`` made of ``value`` (str with its UTF-8 cached, or bytes)."""
    cdef Py_ssize_t size
    try:
        text = dumps(value)
        if PyBytes_Check(text):
            return text
        if PyUnicode_Check(text):
            PyUnicode_AsUTF8AndSize(text, &size)  # caches UTF-8; fails on lone surrogates
            return text
    except (TypeError, ValueError, OverflowError):
        pass  # UnicodeEncodeError is a ValueError too
    raise _record_error(index, field, "type")


cdef inline const char* _utf8(object text, Py_ssize_t* size) except NULL:
    """Pointer to the bytes of a bytes object or the cached UTF-8 of a checked str."""
    if PyBytes_Check(text):
        size[0] = PyBytes_GET_SIZE(text)
        return PyBytes_AS_STRING(text)
    return PyUnicode_AsUTF8AndSize(text, size)


cdef Py_ssize_t _checked(const char* p, Py_ssize_t n, Py_ssize_t index, str field) except -2:
    cdef Py_ssize_t members
    cdef Py_ssize_t err = _scan(p, n, &members)
    if err >= 0:
        raise _record_error(index, field, "json", f"invalid JSON at byte {err}")
    return members


cdef int _name(object value, Py_ssize_t index, str field, Py_ssize_t limit,
               const char** ptr, Py_ssize_t* size) except -1:
    """Validate a tag/node str and point at its UTF-8 (size 0 when absent)."""
    size[0] = 0
    if value is None:
        return 0
    if not PyUnicode_Check(value):
        raise _record_error(index, field, "type")
    if PyUnicode_GET_LENGTH(value) == 0:
        raise _record_error(index, field, "empty")
    try:
        ptr[0] = PyUnicode_AsUTF8AndSize(value, size)
    except UnicodeEncodeError:
        raise _record_error(index, field, "type") from None
    if size[0] > limit:
        raise _record_error(index, field, "too_large")
    return 0


cdef inline object _get(object record, str key):
    # Exact dicts skip the method call; a missing key reads as None.
    cdef PyObject* found = PyDict_GetItemWithError(record, key)
    # Borrowed reference; the <object> cast makes Cython take its own reference.
    return <object>found if found != NULL else None


cdef inline void _keep(PyObject** slot, object obj) noexcept:
    Py_INCREF(obj)
    slot[0] = <PyObject*>obj


cdef enum:
    # Exact dicts with up to this many items are read in one pass over their items, which
    # is cheaper than four lookups (most records hold one to three keys).
    _SCAN_ITEMS = 8


cdef inline int _field_slot(PyObject* key) noexcept:
    """0..3 when ``key`` is the str "data"/"meta"/"tag"/"node", 4 for any other exact
    str, -1 when only a real lookup can tell (another type or a non-compact str)."""
    cdef Py_ssize_t size
    cdef const char* p
    if not PyUnicode_CheckExact(key):
        return -1
    size = PyUnicode_GET_LENGTH_P(key)
    if size != 3 and size != 4:
        return 4
    if not PyUnicode_IS_COMPACT_ASCII(key):
        return -1
    p = <const char*>PyUnicode_DATA(key)
    if size == 3:
        return 2 if memcmp(p, b"tag", 3) == 0 else 4
    if memcmp(p, b"data", 4) == 0:
        return 0
    if memcmp(p, b"meta", 4) == 0:
        return 1
    return 3 if memcmp(p, b"node", 4) == 0 else 4


cdef bint _scan_items(object record, PyObject** slots) noexcept:
    """Fill slots[0:4] (borrowed; NULL = absent) from a small exact dict whose keys are
    all exact str, as lookups would (str keys compare by value). False if it cannot."""
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* value
    cdef int slot
    if PyDict_GET_SIZE(record) > _SCAN_ITEMS:
        return False
    slots[0] = slots[1] = slots[2] = slots[3] = NULL
    # No Python code runs in this loop, so the dict cannot change under it.
    while PyDict_Next(record, &pos, &key, &value):
        slot = _field_slot(key)
        if slot < 0:
            return False
        if slot < 4:
            slots[slot] = value
    return True


cdef int _fetch(object record, Py_ssize_t index, _Fields* f) except -1:
    """Pass 1: take new references to a record's data/meta/tag/node."""
    cdef PyObject* found
    cdef PyObject* slots[4]
    cdef int k
    if PyDict_CheckExact(record) and _scan_items(record, slots):
        if slots[0] == NULL:
            raise _record_error(index, "data", "missing")
        for k in range(4):
            _keep(&f.v[k], <object>slots[k] if slots[k] != NULL else None)
        return 0
    if PyDict_CheckExact(record):
        found = PyDict_GetItemWithError(record, "data")
        if found == NULL:
            raise _record_error(index, "data", "missing")
        data = <object>found
        meta, tag, node = _get(record, "meta"), _get(record, "tag"), _get(record, "node")
    elif isinstance(record, Mapping):
        data = record.get("data", _MISSING)
        if data is _MISSING:
            raise _record_error(index, "data", "missing")
        meta, tag, node = record.get("meta"), record.get("tag"), record.get("node")
    else:
        raise _record_error(index, "record", "type")
    _keep(&f.v[_DATA], data)
    _keep(&f.v[_META], meta)
    _keep(&f.v[_TAG], tag)
    _keep(&f.v[_NODE], node)
    return 0


cdef object _dump_all(const _Fields* fields, Py_ssize_t nrec, bint meta, object dumps,
                      _Dumped* out):
    """Pass 2: one dumps() call over every data value (meta False) or dict meta (True) of
    fields[0:nrec] that pass 3 would otherwise dumps() one by one, split into ``out``.
    Returns the text ``out`` points into (the caller keeps it alive), or None."""
    cdef Py_ssize_t i, size, count
    cdef const char* p
    cdef list values = []
    for i in range(nrec):
        value = <object>fields[i].v[_META if meta else _DATA]
        if (PyDict_Check(value) if meta else value is not None and not _is_buffer(value)):
            values.append(value)
    if not values:
        return None
    try:
        text = dumps(values)
        if PyBytes_Check(text):
            p, size = PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text)
        elif PyUnicode_Check(text):
            p = PyUnicode_AsUTF8AndSize(text, &size)
        else:
            return None
    except Exception:
        # Which value failed is for the per-record path to find: it raises the first
        # failing record's error (or this same exception) exactly as it always has.
        return None
    count = len(values)
    out.spans = <_Span*>malloc(count * sizeof(_Span))
    if out.spans == NULL:
        raise MemoryError()
    out.base = p
    if size < _NOGIL_BYTES:
        out.valid = _split_array(<const unsigned char*>p, size, count, out.spans)
    else:
        with nogil:
            out.valid = _split_array(<const unsigned char*>p, size, count, out.spans)
    return text


cdef inline const _Span* _take(_Dumped* d) noexcept:
    """The next batch-encoded value's span, or NULL when it must go through dumps()."""
    cdef Py_ssize_t j = d.next
    d.next += 1
    return &d.spans[j] if j < d.valid else NULL


cdef int _check_meta(object meta, Py_ssize_t index, const _Limits* lim, object dumps,
                     _Dumped* dm, _Rec* rec, PyObject** keep) except -1:
    cdef Py_ssize_t keys
    cdef const _Span* span = NULL
    if PyDict_Check(meta):
        span = _take(dm)
    elif not _is_buffer(meta):
        raise _record_error(index, "meta", "type")
    if span != NULL:
        rec.meta, rec.meta_len = dm.base + span.start, span.size
    else:
        text = _raw_json(meta) if _is_buffer(meta) else _dumps_json(meta, index, "meta", dumps)
        _keep(keep, text)
        rec.meta = _utf8(text, &rec.meta_len)
    if rec.meta_len > lim.meta:
        raise _record_error(index, "meta", "too_large")
    keys = span.members if span != NULL else _checked(rec.meta, rec.meta_len, index, "meta")
    if keys < 0:
        raise _record_error(index, "meta", "type")
    if keys > lim.keys:
        raise _record_error(index, "meta", "meta_keys")
    return 0


cdef int _check_record(const _Fields* f, Py_ssize_t index, object default_node,
                       const _Limits* lim, object dumps, _Dumped* dd, _Dumped* dm,
                       _Node* dflt, _Rec* rec, PyObject** keep, list tags) except -1:
    """Pass 3: validate one record (order: data, meta, tag, node, size) and point ``rec``
    at its parts. ``keep`` (2 slots) receives new references to the texts made here for
    data and meta; the rest points into ``f``'s values, default_node or pass 2's texts."""
    cdef const _Span* span
    data = <object>f.v[_DATA]
    if data is None:
        rec.data, rec.data_len = "null", 4
    elif _is_buffer(data):
        text = _raw_json(data)
        _keep(keep, text)
        rec.data = _utf8(text, &rec.data_len)
        _checked(rec.data, rec.data_len, index, "data")
    else:
        span = _take(dd)
        if span != NULL:  # already checked by _split_array
            rec.data, rec.data_len = dd.base + span.start, span.size
        else:
            text = _dumps_json(data, index, "data", dumps)
            _keep(keep, text)
            rec.data = _utf8(text, &rec.data_len)
            _checked(rec.data, rec.data_len, index, "data")
    if <object>f.v[_META] is not None:
        _check_meta(<object>f.v[_META], index, lim, dumps, dm, rec, keep + 1)
    _name(<object>f.v[_TAG], index, "tag", lim.tag, &rec.tag, &rec.tag_len)
    if rec.tag_len:
        tag_bytes = PyBytes_FromStringAndSize(rec.tag, rec.tag_len)
        # Unchecked list store: ``tags`` has one slot per record and index < len(records).
        tags[index] = tag_bytes
        rec.tag = PyBytes_AS_STRING(tag_bytes)
    node = <object>f.v[_NODE]
    if node is None:
        node = default_node
        if dflt.size >= 0:  # checked before (a check has no side effects, so skip it)
            rec.node, rec.node_len = dflt.ptr, dflt.size
        else:
            _name(node, index, "node", lim.node, &rec.node, &rec.node_len)
            dflt.ptr, dflt.size = rec.node, rec.node_len
    else:
        _name(node, index, "node", lim.node, &rec.node, &rec.node_len)
    if rec.data_len + rec.meta_len > lim.record:
        raise _record_error(index, "record", "too_large")
    return 0


cdef unsigned char* _write_frame(unsigned char* p, const _Rec* rec, uint64_t seq, int64_t ts,
                                 uint32_t salt) noexcept nogil:
    # The narrowing length casts hold: _check_record checked node/tag against limits
    # clamped to 0xFFFF, and data+meta against one that keeps frame_len within a u32.
    cdef Py_ssize_t size = _MIN_FRAME + rec.node_len + rec.tag_len + rec.meta_len + rec.data_len
    cdef unsigned char* q = p + _HEADER
    _st32(p, <uint32_t>size)
    p[8] = 1  # KIND_RECORD
    p[9] = 0
    _st16(p + 10, <uint16_t>rec.node_len)
    _st16(p + 12, <uint16_t>rec.tag_len)
    _st16(p + 14, 0)
    _st32(p + 16, <uint32_t>rec.meta_len)
    _st32(p + 20, <uint32_t>rec.data_len)
    _st64(p + 24, seq)
    _st64(p + 32, <uint64_t>ts)
    # Absent parts have NULL pointers, and memcpy(dst, NULL, 0) is undefined behaviour.
    if rec.node_len:
        memcpy(q, rec.node, rec.node_len)
        q += rec.node_len
    if rec.tag_len:
        memcpy(q, rec.tag, rec.tag_len)
        q += rec.tag_len
    if rec.meta_len:
        memcpy(q, rec.meta, rec.meta_len)
        q += rec.meta_len
    memcpy(q, rec.data, rec.data_len)
    q[rec.data_len] = 0  # FLAG_LIVE
    _st32(p + 4, topics_frame_crc(salt, p, size))
    return p + size


cdef void _write_frames(unsigned char* out, const _Rec* recs, Py_ssize_t n, uint64_t first_seq,
                        int64_t ts, uint32_t salt) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out = _write_frame(out, &recs[i], first_seq + <uint64_t>i, ts, salt)


@cython.boundscheck(False)  # batch[i] with i < len(batch) of a tuple we own
@cython.wraparound(False)
def encode_batch(records, uint64_t first_seq, int64_t ts_ms, default_node, uint32_t salt,
                 tuple limits not None, dumps):
    """Validate and encode a write batch into concatenated record frames; see _ext.pyi."""
    cdef _Limits lim = _parse_limits(limits)
    # A snapshot: dumps() may run code that mutates the caller's list while we work.
    cdef tuple batch = tuple(records)
    cdef Py_ssize_t n = len(batch), i = 0, stop, total = 0
    cdef int k
    cdef bint tagged = False
    cdef _Rec* recs
    cdef _Fields* fields
    cdef PyObject** keep
    cdef unsigned char* out
    cdef _Dumped dd, dm
    cdef _Node dflt
    if n == 0:
        return b"", None
    if <uint64_t>(n - 1) > UINT64_MAX - first_seq:
        raise OverflowError("seq overflows u64")
    cdef list tags = [None] * n
    dd.base = dm.base = NULL
    dd.spans = dm.spans = NULL
    dd.valid = dm.valid = dd.next = dm.next = 0
    dflt.ptr, dflt.size = NULL, -1
    recs = <_Rec*>calloc(n, sizeof(_Rec))
    fields = <_Fields*>calloc(n, sizeof(_Fields))
    keep = <PyObject**>calloc(2 * n, sizeof(PyObject*))
    try:
        if recs == NULL or fields == NULL or keep == NULL:
            raise MemoryError()
        stop, error = n, None
        try:
            while i < n:
                _fetch(batch[i], i, &fields[i])
                i += 1
        except Exception as exc:  # raised below, after the records before it
            stop, error = i, exc
        data_text = meta_text = None  # what dd/dm point into; alive until we return
        if dumps is not None and (dumps is _UJSON_DUMPS or dumps is _UJSON_ENCODE):
            data_text = _dump_all(fields, stop, False, dumps, &dd)
            meta_text = _dump_all(fields, stop, True, dumps, &dm)
        for i in range(stop):
            _check_record(&fields[i], i, default_node, &lim, dumps, &dd, &dm, &dflt,
                          &recs[i], keep + 2 * i, tags)
            total += _MIN_FRAME + recs[i].node_len + recs[i].tag_len + recs[i].meta_len + recs[i].data_len
            tagged |= recs[i].tag_len > 0
        if error is not None:
            raise error
        frames = PyBytes_FromStringAndSize(NULL, total)
        out = <unsigned char*>PyBytes_AS_STRING(frames)
        if total < _NOGIL_BYTES:
            _write_frames(out, recs, n, first_seq, ts_ms, salt)
        else:
            with nogil:
                _write_frames(out, recs, n, first_seq, ts_ms, salt)
        return frames, (tags if tagged else None)
    finally:
        if fields != NULL:
            for i in range(n):
                for k in range(4):
                    Py_XDECREF(fields[i].v[k])
        if keep != NULL:
            for i in range(2 * n):
                Py_XDECREF(keep[i])
        free(dd.spans)
        free(dm.spans)
        free(keep)
        free(fields)
        free(recs)


# --- frames -------------------------------------------------------------------------

cdef enum:
    _OK = 0
    _TRUNCATED = 1
    _CRC = 2
    _KIND = 3
    _SEQ = 4

cdef tuple _FRAME_REASONS = ("", "truncated", "crc", "kind", "seq")

ctypedef struct _Walk:
    # In: which continuity checks to make.
    bint check_seq
    uint64_t first_seq
    bint seq_wrapped  # first_seq itself overflowed u64: no frame can follow
    bint check_ts
    int64_t min_ts
    # Out: the first failure.
    int reason
    Py_ssize_t index, offset


cdef Py_ssize_t _frame_check(const unsigned char* p, size_t avail, uint32_t salt,
                             bint verify) noexcept nogil:
    """Length of the valid frame at p, or -reason. Order matches _pure._check_frame."""
    cdef uint64_t size, parts
    if avail < _MIN_FRAME:
        return -_TRUNCATED
    size = _ld32(p)
    if size > avail:
        return -_TRUNCATED
    if size < _MIN_FRAME:
        return -_KIND
    if verify and _ld32(p + 4) != topics_frame_crc(salt, p, size):
        return -_CRC
    # From here on p[0:size] is in bounds (size <= avail), so every field read is too.
    # The trailer is not checked: only a delete ever writes it after the frame is durable,
    # so any non-zero value (even one garbled by a power cut mid-flip) reads as deleted.
    if p[8] != 1 or p[9] != 0 or _ld16(p + 14) != 0:
        return -_KIND
    parts = <uint64_t>_ld16(p + 10) + _ld16(p + 12) + _ld32(p + 16) + _ld32(p + 20)
    if _ld32(p + 20) == 0 or _MIN_FRAME + parts != size:
        return -_KIND
    return <Py_ssize_t>size  # <= avail, a buffer length, so it fits


cdef Py_ssize_t _walk(const unsigned char* p, size_t n, uint32_t salt, bint verify,
                      _Walk* w) noexcept nogil:
    """Count the frames in p[0:n]; -1 with w.reason/index/offset set on the first bad one."""
    cdef size_t off = 0
    cdef Py_ssize_t i = 0, size
    cdef int64_t ts
    while off < n:
        size = _frame_check(p + off, n - off, salt, verify)
        if size > 0 and w.check_seq:
            ts = <int64_t>_ld64(p + off + 32)
            if (w.seq_wrapped or _ld64(p + off + 24) != w.first_seq + <uint64_t>i
                    or w.first_seq + <uint64_t>i < w.first_seq or (w.check_ts and ts < w.min_ts)):
                size = -_SEQ
            w.check_ts, w.min_ts = True, ts
        if size < 0:
            w.reason, w.index, w.offset = <int>-size, i, <Py_ssize_t>off  # small; off < n
            return -1
        off += <size_t>size
        i += 1
    return i


cdef Py_ssize_t _walk_maybe_nogil(const unsigned char* p, size_t n, uint32_t salt, bint verify,
                                  _Walk* w) noexcept:
    cdef Py_ssize_t count
    if n < _NOGIL_BYTES:
        return _walk(p, n, salt, verify, w)
    with nogil:
        count = _walk(p, n, salt, verify, w)
    return count


cdef object _walk_error(const _Walk* w):
    reason = _FRAME_REASONS[w.reason]
    return FrameError(f"frame {w.index} at offset {w.offset}: {reason}", w.index, "frame", reason)


cdef Py_ssize_t _walk_buffer(object buf, uint32_t salt, bint verify, Py_buffer* view) except -1:
    """Take ``buf``'s buffer into ``view`` and walk its frames; the frame count. The caller
    releases ``view``; on an error it is released here."""
    cdef _Walk w
    cdef Py_ssize_t count
    w.check_seq = False
    _get_buffer(buf, view)
    count = _walk_maybe_nogil(<const unsigned char*>view.buf, view.len, salt, verify, &w)
    if count < 0:
        PyBuffer_Release(view)
        raise _walk_error(&w)
    return count


def iter_frames(buf, uint32_t salt, bint verify=True):
    """Walk concatenated frames; return [(offset, frame_len), ...]; see _ext.pyi."""
    cdef Py_buffer view
    cdef Py_ssize_t count, i, off = 0
    cdef uint32_t size
    cdef const unsigned char* p
    count = _walk_buffer(buf, salt, verify, &view)
    try:
        p = <const unsigned char*>view.buf
        spans = [None] * count
        for i in range(count):
            size = _ld32(p + off)
            spans[i] = (off, size)  # i < count == len(spans)
            off += size
        return spans
    finally:
        PyBuffer_Release(&view)


def frame_offsets(buf, uint32_t salt, bint verify=True, Py_ssize_t start=0):
    """Walk concatenated frames like iter_frames; return array('I') of start + offset."""
    cdef Py_buffer view
    cdef Py_ssize_t count, i
    cdef size_t off = 0
    cdef const unsigned char* p
    cdef array.array out
    if start < 0:
        raise ValueError("negative start offset")
    count = _walk_buffer(buf, salt, verify, &view)
    try:
        p = <const unsigned char*>view.buf
        if <uint64_t>start + <uint64_t>view.len > 0xFFFFFFFF:
            raise OverflowError("frame offsets pass 4 GiB (u32)")
        out = array.clone(_U32_ARRAY, count, False)
        for i in range(count):  # every frame was walked above, so every read is in bounds
            out.data.as_uints[i] = <uint32_t>(<size_t>start + off)
            off += _ld32(p + off)
        return out
    finally:
        PyBuffer_Release(&view)


def encode_wal_frames(frames, uint32_t salt):
    """Encode (lsn, entry_type, payload) triples as consecutive WAL frames; see _ext.pyi."""
    cdef list items = list(frames)  # a snapshot, and it keeps every payload alive
    cdef Py_ssize_t n = len(items), i
    cdef size_t total = 0, pos = 0, size
    cdef const unsigned char** src = NULL
    cdef unsigned char* out
    cdef unsigned char* q
    for item in items:
        if type(item) is not tuple or len(<tuple>item) != 3:
            raise TypeError("each frame must be a (lsn, entry_type, payload) tuple")
        lsn, kind, payload = <tuple>item
        _wal_frame_fields(lsn, kind, payload)
        total += _WAL_HEADER + <size_t>PyBytes_GET_SIZE(payload)
    buf = PyByteArray_FromStringAndSize(NULL, <Py_ssize_t>total)  # total: sum of buffer sizes
    if n == 0:
        return buf
    out = <unsigned char*>PyByteArray_AS_STRING(buf)
    src = <const unsigned char**>malloc(n * sizeof(unsigned char*))
    if src == NULL:
        raise MemoryError()
    try:
        for i in range(n):  # i < n == len(items)
            lsn, kind, payload = items[i]
            size = <size_t>PyBytes_GET_SIZE(payload)
            q = out + pos
            _st32(q, <uint32_t>size)  # checked <= u32 above
            _st64(q + 8, <uint64_t>lsn)
            q[16], q[17], q[18], q[19] = <unsigned char>kind, 0, 0, 0
            src[i] = <const unsigned char*>PyBytes_AS_STRING(payload)
            pos += _WAL_HEADER + size
        if total < _NOGIL_BYTES:
            _fill_wal_frames(out, src, n, salt)
        else:
            with nogil:
                _fill_wal_frames(out, src, n, salt)
    finally:
        free(src)
    return buf


cdef enum:
    _WAL_HEADER = 20


cdef int _wal_frame_fields(object lsn, object kind, object payload) except -1:
    if not isinstance(lsn, int) or not 0 <= lsn <= UINT64_MAX:
        raise ValueError(f"lsn {lsn!r} is not a u64")
    if not isinstance(kind, int) or not 0 <= kind <= 0xFF:
        raise ValueError(f"entry_type {kind!r} is not a u8")
    if not PyBytes_Check(payload):
        raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
    if PyBytes_GET_SIZE(payload) > 0xFFFFFFFF:
        raise ValueError(f"payload of {PyBytes_GET_SIZE(payload)} bytes is over u32")
    return 0


cdef void _fill_wal_frames(unsigned char* out, const unsigned char** src, Py_ssize_t n,
                           uint32_t salt) noexcept nogil:
    """Copy each payload behind its header (already written) and set the frame CRC."""
    cdef Py_ssize_t i
    cdef size_t size
    cdef uint32_t crc
    for i in range(n):
        size = _ld32(out)
        memcpy(out + _WAL_HEADER, src[i], size)
        crc = topics_crc32c(topics_crc32c(salt, out, 4), out + 8, _WAL_HEADER - 8 + size)
        _st32(out + 4, crc)
        out += _WAL_HEADER + size


def frame_seq(buf, Py_ssize_t offset=0):
    """The seq field of the frame starting at ``offset``."""
    cdef Py_buffer view
    if offset < 0:
        raise IndexError("negative frame offset")
    _get_buffer(buf, &view)
    try:
        if view.len - offset < _HEADER:
            raise FrameError(f"frame at offset {offset}: truncated", -1, "frame", "truncated")
        return _ld64(<const unsigned char*>view.buf + offset + 24)
    finally:
        PyBuffer_Release(&view)


include "_trie.pxi"
include "_segment.pxi"
