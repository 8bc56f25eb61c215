# Walking frames and the WAL frame codec; included into _ext.pyx.

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
