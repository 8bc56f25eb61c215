# Rendering frames as JSON records (all nogil; sizes computed first, then written
# exactly); included into _ext.pyx.

cdef const char* _DIGIT_PAIRS = (
    b"00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    b"40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    b"8081828384858687888990919293949596979899"
)
cdef const char* _HEX_DIGITS = b"0123456789abcdef"
# Bytes of JSON string escaping beyond the byte itself: 1 for \" \\ \b \f \n \r \t,
# 5 for the other control characters (\u00XX), 0 for everything else (kept verbatim).
cdef unsigned char _ESC_EXTRA[256]
cdef unsigned char _ESC_SHORT[256]


cdef void _init_escape_tables() noexcept:
    cdef int c
    for c in range(256):
        _ESC_EXTRA[c] = 5 if c < 0x20 else 0
        _ESC_SHORT[c] = 0
    for c, short in ((c'"', c'"'), (c'\\', c'\\'), (8, c'b'), (12, c'f'), (10, c'n'), (13, c'r'), (9, c't')):
        _ESC_EXTRA[c] = 1
        _ESC_SHORT[c] = short


_init_escape_tables()


# --- rendering helpers (all nogil; sizes computed first, then written exactly) -------


cdef inline Py_ssize_t _u64_len(uint64_t v) noexcept nogil:
    cdef Py_ssize_t n = 0
    while v >= 10000:
        v //= 10000
        n += 4
    return n + (1 if v < 10 else 2 if v < 100 else 3 if v < 1000 else 4)


cdef inline Py_ssize_t _i64_len(int64_t v) noexcept nogil:
    return 1 + _u64_len(<uint64_t>0 - <uint64_t>v) if v < 0 else _u64_len(<uint64_t>v)


cdef inline unsigned char* _put_u64(unsigned char* q, uint64_t v) noexcept nogil:
    cdef unsigned char tmp[20]
    cdef Py_ssize_t k = 20
    cdef uint64_t r
    while v >= 100:
        r = v % 100
        v //= 100
        k -= 2
        tmp[k] = _DIGIT_PAIRS[2 * r]
        tmp[k + 1] = _DIGIT_PAIRS[2 * r + 1]
    if v >= 10:
        k -= 2
        tmp[k] = _DIGIT_PAIRS[2 * v]
        tmp[k + 1] = _DIGIT_PAIRS[2 * v + 1]
    else:
        k -= 1
        tmp[k] = <unsigned char>(c'0' + v)
    memcpy(q, tmp + k, 20 - k)
    return q + 20 - k


cdef inline unsigned char* _put_i64(unsigned char* q, int64_t v) noexcept nogil:
    if v < 0:
        q[0] = c'-'
        return _put_u64(q + 1, <uint64_t>0 - <uint64_t>v)  # exact even for INT64_MIN
    return _put_u64(q, <uint64_t>v)


cdef inline unsigned char* _put(unsigned char* q, const char* s, Py_ssize_t n) noexcept nogil:
    memcpy(q, s, n)
    return q + n


cdef inline Py_ssize_t _escaped_len(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k, size = n
    for k in range(n):
        size += _ESC_EXTRA[p[k]]
    return size


cdef unsigned char* _put_escaped(unsigned char* q, const unsigned char* p, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k = 0
    cdef unsigned char c
    while k < n and _ESC_EXTRA[p[k]] == 0:  # fast path: usually nothing needs escaping
        k += 1
    q = _put(q, <const char*>p, k)
    for k in range(k, n):
        c = p[k]
        if _ESC_EXTRA[c] == 0:
            q[0] = c
            q += 1
        elif _ESC_EXTRA[c] == 1:
            q[0], q[1] = c'\\', _ESC_SHORT[c]
            q += 2
        else:
            q = _put(q, b"\\u00", 4)
            q[0], q[1] = _HEX_DIGITS[c >> 4], _HEX_DIGITS[c & 15]
            q += 2
    return q


cdef inline Py_ssize_t _record_size(const unsigned char* f, int flags) noexcept nogil:
    """Exact rendered size of frame f; must agree byte for byte with _put_record."""
    cdef Py_ssize_t nlen = _ld16(f + 10), tlen = _ld16(f + 12)
    cdef Py_ssize_t size = 8 + _u64_len(_ld64(f + 24)) + 7 + _i64_len(<int64_t>_ld64(f + 32)) + 1
    if nlen:
        size += 11 + _escaped_len(f + _HEADER, nlen)
    if flags & 4 and tlen:
        size += 10 + _escaped_len(f + _HEADER + nlen, tlen)
    if flags & 1:
        size += 8 + _ld32(f + 20)
    if flags & 2 and _ld32(f + 16):
        size += 8 + _ld32(f + 16)
    return size


cdef unsigned char* _put_record(unsigned char* q, const unsigned char* f, int flags) noexcept nogil:
    cdef Py_ssize_t nlen = _ld16(f + 10), tlen = _ld16(f + 12)
    cdef Py_ssize_t mlen = _ld32(f + 16), dlen = _ld32(f + 20)
    cdef const unsigned char* body = f + _HEADER
    q = _put_u64(_put(q, b'{"$seq":', 8), _ld64(f + 24))
    q = _put_i64(_put(q, b',"$ts":', 7), <int64_t>_ld64(f + 32))
    if nlen:
        q = _put_escaped(_put(q, b',"$node":"', 10), body, nlen)
        q = _put(q, b'"', 1)
    if flags & 4 and tlen:
        q = _put_escaped(_put(q, b',"$tag":"', 9), body + nlen, tlen)
        q = _put(q, b'"', 1)
    if flags & 1:
        q = _put(_put(q, b',"data":', 8), <const char*>body + nlen + tlen + mlen, dlen)
    if flags & 2 and mlen:
        q = _put(_put(q, b',"meta":', 8), <const char*>body + nlen + tlen, mlen)
    return _put(q, b"}", 1)


cdef void _put_records(unsigned char* q, const unsigned char* buf, const uint32_t* offsets,
                       Py_ssize_t n, int flags) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(n):
        if k:
            q[0] = c','
            q += 1
        q = _put_record(q, buf + offsets[k], flags)
