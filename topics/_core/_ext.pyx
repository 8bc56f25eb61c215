# cython: language_level=3
"""Compiled core of topics (``topics._core._ext``); interface and semantics in _ext.pyi.

Behaviour matches the pure-Python oracle ``_pure`` exactly (results, error fields and
messages); the tests compare the two. This module exists for speed: per-record and
per-byte work runs in C on raw pointers, with the GIL released around buffer loops that
are long enough for the release to pay off.

setup.py turns bounds/wraparound checks off for the whole module in release builds (and
on in TOPICS_CYTHON_DEBUG builds); the few places that index Python sequences say
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


cdef Py_ssize_t _scan(const char* p, Py_ssize_t n, Py_ssize_t* members,
                      Py_ssize_t* reserved) noexcept:
    """_json_scan, releasing the GIL for long inputs (p must be kept alive by the caller)."""
    cdef Py_ssize_t err
    if n < _NOGIL_BYTES:
        return _json_scan(<const unsigned char*>p, n, members, reserved)
    with nogil:
        err = _json_scan(<const unsigned char*>p, n, members, reserved)
    return err


def json_check(data):
    """Check that ``data`` is exactly one JSON value; see _ext.pyi."""
    cdef Py_buffer view
    cdef Py_ssize_t members, reserved, err
    cdef str message
    _get_buffer(data, &view)
    try:
        err = _scan(<const char*>view.buf, view.len, &members, &reserved)
        if err >= 0:
            message = _json_message(<const unsigned char*>view.buf, view.len, err)
    finally:
        PyBuffer_Release(&view)
    if err >= 0:
        raise FrameError(message, -1, "data", "json")
    return members


include "_encode.pxi"
include "_frames.pxi"
include "_trie.pxi"
include "_render.pxi"
include "_read_filter.pxi"
include "_where.pxi"
include "_segment.pxi"
