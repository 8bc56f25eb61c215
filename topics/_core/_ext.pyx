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
from cpython.bytearray cimport PyByteArray_Check
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_Check, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_Check, PyDict_CheckExact, PyDict_GetItemWithError
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.set cimport PyAnySet_Check
from cpython.unicode cimport PyUnicode_Check, PyUnicode_GET_LENGTH
from libc.stdint cimport UINT64_MAX, int64_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcmp, memcpy, memmove

from collections.abc import Mapping

cdef extern from "Python.h":
    bint PyMemoryView_Check(object obj)
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL

cdef extern from "crc32c_impl.h":
    void topics_crc32c_init() noexcept nogil
    uint32_t topics_crc32c(uint32_t crc, const void* buf, size_t n) noexcept nogil
    uint32_t topics_crc32c_sw(uint32_t crc, const void* buf, size_t n) noexcept nogil
    int topics_crc32c_hw_available() noexcept nogil

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

ctypedef struct _Limits:
    Py_ssize_t record, meta, keys, tag, node

ctypedef struct _Rec:
    const char* node
    const char* tag
    const char* meta
    const char* data
    Py_ssize_t node_len, tag_len, meta_len, data_len

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


cdef object _to_json(object value, Py_ssize_t index, str field, object dumps):
    """Raw JSON bytes as given, or what ``dumps`` made of ``value`` (str or bytes)."""
    cdef Py_ssize_t size
    if PyBytes_Check(value):
        return value
    if PyByteArray_Check(value) or PyMemoryView_Check(value):
        return memoryview(value).tobytes()  # an immutable copy we can point into
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


cdef int _encode_meta(object meta, Py_ssize_t index, const _Limits* lim, object dumps,
                      _Rec* rec, PyObject** keep) except -1:
    cdef Py_ssize_t keys
    if not (PyDict_Check(meta) or PyBytes_Check(meta) or PyByteArray_Check(meta)
            or PyMemoryView_Check(meta)):
        raise _record_error(index, "meta", "type")
    text = _to_json(meta, index, "meta", dumps)
    _keep(keep, text)
    rec.meta = _utf8(text, &rec.meta_len)
    if rec.meta_len > lim.meta:
        raise _record_error(index, "meta", "too_large")
    keys = _checked(rec.meta, rec.meta_len, index, "meta")
    if keys < 0:
        raise _record_error(index, "meta", "type")
    if keys > lim.keys:
        raise _record_error(index, "meta", "meta_keys")
    return 0


cdef int _encode_record(object record, Py_ssize_t index, object default_node, const _Limits* lim,
                        object dumps, _Rec* rec, PyObject** keep, list tags) except -1:
    """Validate one record (order: data, meta, tag, node, size) and point ``rec`` at its
    parts. ``keep`` receives new references to every object those pointers point into,
    so a dumps() that mutates the caller's records cannot free them under us."""
    cdef PyObject* found
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
    if data is None:
        rec.data, rec.data_len = "null", 4
    else:
        text = _to_json(data, index, "data", dumps)
        _keep(keep, text)
        rec.data = _utf8(text, &rec.data_len)
        _checked(rec.data, rec.data_len, index, "data")
    if meta is not None:
        _encode_meta(meta, index, lim, dumps, rec, keep + 1)
    _name(tag, index, "tag", lim.tag, &rec.tag, &rec.tag_len)
    if rec.tag_len:
        tag_bytes = PyBytes_FromStringAndSize(rec.tag, rec.tag_len)
        # Unchecked list store: ``tags`` has one slot per record and index < len(records).
        tags[index] = tag_bytes
        rec.tag = PyBytes_AS_STRING(tag_bytes)
    if node is None:
        node = default_node
    _name(node, index, "node", lim.node, &rec.node, &rec.node_len)
    if rec.node_len:
        _keep(keep + 2, node)
    if rec.data_len + rec.meta_len > lim.record:
        raise _record_error(index, "record", "too_large")
    return 0


cdef unsigned char* _write_frame(unsigned char* p, const _Rec* rec, uint64_t seq, int64_t ts,
                                 uint32_t salt) noexcept nogil:
    # The narrowing length casts hold: _encode_record checked node/tag against limits
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
    _st32(p + 4, topics_crc32c(topics_crc32c(salt, p, 4), p + 8, size - 9))
    return p + size


cdef void _write_frames(unsigned char* out, const _Rec* recs, Py_ssize_t n, uint64_t first_seq,
                        int64_t ts, uint32_t salt) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out = _write_frame(out, &recs[i], first_seq + <uint64_t>i, ts, salt)


@cython.boundscheck(False)  # records[i] with i < len(records) of a tuple we own
@cython.wraparound(False)
def encode_batch(records, uint64_t first_seq, int64_t ts_ms, default_node, uint32_t salt,
                 tuple limits not None, dumps):
    """Validate and encode a write batch into concatenated record frames; see _ext.pyi."""
    cdef _Limits lim = _parse_limits(limits)
    # A snapshot: dumps() may run code that mutates the caller's list while we work.
    cdef tuple batch = tuple(records)
    cdef Py_ssize_t n = len(batch), i, total = 0
    cdef bint tagged = False
    cdef _Rec* recs
    cdef PyObject** keep
    cdef unsigned char* out
    if n == 0:
        return b"", None
    if <uint64_t>(n - 1) > UINT64_MAX - first_seq:
        raise OverflowError("seq overflows u64")
    cdef list tags = [None] * n
    recs = <_Rec*>calloc(n, sizeof(_Rec))
    keep = <PyObject**>calloc(3 * n, sizeof(PyObject*))
    try:
        if recs == NULL or keep == NULL:
            raise MemoryError()
        for i in range(n):
            _encode_record(batch[i], i, default_node, &lim, dumps, &recs[i], keep + 3 * i, tags)
            total += _MIN_FRAME + recs[i].node_len + recs[i].tag_len + recs[i].meta_len + recs[i].data_len
            tagged |= recs[i].tag_len > 0
        frames = PyBytes_FromStringAndSize(NULL, total)
        out = <unsigned char*>PyBytes_AS_STRING(frames)
        if total < _NOGIL_BYTES:
            _write_frames(out, recs, n, first_seq, ts_ms, salt)
        else:
            with nogil:
                _write_frames(out, recs, n, first_seq, ts_ms, salt)
        return frames, (tags if tagged else None)
    finally:
        if keep != NULL:
            for i in range(3 * n):
                Py_XDECREF(keep[i])
        free(keep)
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
    if verify and _ld32(p + 4) != topics_crc32c(topics_crc32c(salt, p, 4), p + 8, size - 9):
        return -_CRC
    # From here on p[0:size] is in bounds (size <= avail), so every field read is too.
    if p[8] != 1 or p[9] != 0 or _ld16(p + 14) != 0 or p[size - 1] > 1:
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


def iter_frames(buf, uint32_t salt, bint verify=True):
    """Walk concatenated frames; return [(offset, frame_len), ...]; see _ext.pyi."""
    cdef Py_buffer view
    cdef _Walk w
    cdef Py_ssize_t count, i, off = 0
    cdef uint32_t size
    cdef const unsigned char* p
    w.check_seq = False
    _get_buffer(buf, &view)
    try:
        p = <const unsigned char*>view.buf
        count = _walk_maybe_nogil(p, view.len, salt, verify, &w)
        if count < 0:
            raise _walk_error(&w)
        spans = [None] * count
        for i in range(count):
            size = _ld32(p + off)
            spans[i] = (off, size)  # i < count == len(spans)
            off += size
        return spans
    finally:
        PyBuffer_Release(&view)


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
