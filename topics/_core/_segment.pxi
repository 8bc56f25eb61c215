# SegmentBuffer and its render path; included into _ext.pyx.
#
# Frames live in one malloc'd buffer (grown by 1.5x while active, shrunk to fit by
# seal()) with a u32 offset per frame. Views handed out by view() and stretches of code
# that hold raw pointers across a GIL release "pin" the buffer: while pinned, a growth
# copies into a fresh buffer and parks the old one as an orphan, freed at the last unpin,
# so a pointer or memoryview never dangles.

cdef enum:
    _MIN_CAPACITY = 16384

cdef char _EMPTY[1]
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


ctypedef struct _SkipList:
    # Up to 8 node names compared with memcmp; bigger or non-set containers use ``in``.
    Py_ssize_t n
    const char* ptr[8]
    Py_ssize_t size[8]


cdef bint _skip_list(object skip_nodes, _SkipList* skip) except -1:
    """Fill ``skip`` from a small set; False when the caller must use ``in`` instead.

    The pointers stay valid: the set owns the bytes, and no Python code runs while they
    are compared, so nothing can remove them from the set meanwhile.
    """
    skip.n = 0
    if not PyAnySet_Check(skip_nodes) or len(skip_nodes) > 8:
        return False
    for item in skip_nodes:
        if PyBytes_Check(item):  # other types can never equal a node's bytes
            skip.ptr[skip.n] = PyBytes_AS_STRING(item)
            skip.size[skip.n] = PyBytes_GET_SIZE(item)
            skip.n += 1
    return True


cdef extern from *:
    """
    #if defined(__SSE2__)
    #include <emmintrin.h>
    #endif
    /* The first offset >= pos where needle[0:len] occurs in s[0:n], or -1. SSE2 where it
       exists: 16 candidate offsets at a time, filtered on the needle's first, second and
       last bytes (a quoted key's opening quote, first letter and closing quote), so a
       JSON object's other strings rarely reach the memcmp. glibc's memmem sets up a
       256-byte table per call, more than this whole search costs on a small record. */
    static inline Py_ssize_t topics_find(const unsigned char *s, Py_ssize_t pos, Py_ssize_t n,
                                         const unsigned char *needle, Py_ssize_t len) {
        if (len <= 1) {
            const unsigned char *p;
            if (len == 0)
                return pos <= n ? pos : -1;
            p = pos < n ? memchr(s + pos, needle[0], (size_t)(n - pos)) : NULL;
            return p == NULL ? -1 : p - s;
        }
    #if defined(__SSE2__)
        /* Bytes broadcast from a register: _mm_set1_epi8 went through the stack here, a
           byte store then a wider load that stalled (perf annotate). */
        const __m128i v0 = _mm_shuffle_epi32(_mm_cvtsi32_si128((int)(needle[0] * 0x01010101u)), 0);
        const __m128i v1 = _mm_shuffle_epi32(_mm_cvtsi32_si128((int)(needle[1] * 0x01010101u)), 0);
        const __m128i vz = _mm_shuffle_epi32(
            _mm_cvtsi32_si128((int)(needle[len - 1] * 0x01010101u)), 0);
        Py_ssize_t last = n - len + 1 - 16;  /* the last offset a full block can start at */
        unsigned skip = 0;
        while (pos <= last || (pos < n - len + 1 && last >= 0)) {
            Py_ssize_t at = pos;
            if (at > last) {  /* the tail: one block ending at the end, minus what was seen */
                skip = (unsigned)(at - last);
                at = last;
            }
            __m128i a = _mm_loadu_si128((const __m128i *)(s + at));
            __m128i b = _mm_loadu_si128((const __m128i *)(s + at + 1));
            __m128i c = _mm_loadu_si128((const __m128i *)(s + at + len - 1));
            unsigned mask = (unsigned)_mm_movemask_epi8(_mm_and_si128(
                _mm_and_si128(_mm_cmpeq_epi8(a, v0), _mm_cmpeq_epi8(b, v1)),
                _mm_cmpeq_epi8(c, vz)));
            mask &= ~((1u << skip) - 1u);
            while (mask) {
                int bit = __builtin_ctz(mask);
                if (len <= 3 || memcmp(s + at + bit + 2, needle + 2, (size_t)(len - 3)) == 0)
                    return at + bit;
                mask &= mask - 1;
            }
            if (at != pos)
                return -1;
            pos += 16;
        }
    #endif
        for (; pos + len <= n; pos++)
            if (s[pos] == needle[0] && s[pos + 1] == needle[1]
                    && memcmp(s + pos, needle, (size_t)len) == 0)
                return pos;
        return -1;
    }
    """
    Py_ssize_t topics_find(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n,
                           const unsigned char* needle, Py_ssize_t len) noexcept nogil


ctypedef struct _Needles:
    # A where predicate's necessary substrings (topics/_where.py rule 5), checked in C.
    Py_ssize_t n
    int part[8]
    const char* ptr[8]
    Py_ssize_t size[8]


cdef int _needles(object keep, _Needles* out) except -1:
    """Fill ``out`` from ``keep.needles``; the tuple (held by the predicate) owns the bytes."""
    out.n = 0
    for part, needle in getattr(keep, "needles", ()):
        if out.n == 8:
            break
        if PyBytes_Check(needle) and PyBytes_GET_SIZE(needle):
            out.part[out.n] = part
            out.ptr[out.n] = PyBytes_AS_STRING(needle)
            out.size[out.n] = PyBytes_GET_SIZE(needle)
            out.n += 1
    return 0


cdef bint _lacks_needle(const _Needles* nd, const unsigned char* f) noexcept nogil:
    """True when frame f cannot match: some part lacks its needle (and, for data/meta,
    holds no backslash that could spell it another way)."""
    cdef Py_ssize_t k, nlen = _ld16(f + 10), tlen = _ld16(f + 12)
    cdef Py_ssize_t mlen = _ld32(f + 16), dlen = _ld32(f + 20), size
    cdef const unsigned char* body = f + _HEADER
    cdef const unsigned char* span
    cdef int part
    for k in range(nd.n):
        part = nd.part[k]
        if part == 1:
            span, size = body, nlen
        elif part == 2:
            span, size = body + nlen, tlen
        elif part == 4:
            span, size = body + nlen + tlen, mlen
        else:
            span, size = body + nlen + tlen + mlen, dlen
        if topics_find(span, 0, size, <const unsigned char*>nd.ptr[k], nd.size[k]) >= 0:
            continue
        if part >= 4 and memchr(span, c'\\', size) != NULL:
            continue
        return True
    return False


# --- where programs (topics/_where.py rule 6) ------------------------------------------

cdef enum:
    _P_EQ_RAW = 1
    _P_EQ_NUM = 2
    _P_GT = 3
    _P_GE = 4
    _P_LT = 5
    _P_LE = 6
    _P_EXISTS = 7
    _P_PREFIX = 8
    _P_AND = 10
    _P_OR = 11
    _P_NOT = 12
    _P_MAX = 64
    _NO = 0
    _YES = 1
    _UNKNOWN = 2

ctypedef struct _Insn:
    int op
    int part
    const unsigned char* key
    Py_ssize_t klen
    const unsigned char* raw
    Py_ssize_t rlen
    double num
    Py_ssize_t count


ctypedef struct _Program:
    Py_ssize_t n
    _Insn insn[_P_MAX]


cdef int _load_program(object keep, _Program* prog) except -1:
    """Fill ``prog`` from ``keep.program`` (n = 0: none). The predicate owns the bytes."""
    prog.n = 0
    program = getattr(keep, "program", None)
    if not program or len(program) > _P_MAX:
        return 0
    cdef _Insn* ins
    for op, part, key, raw, num, count in program:
        ins = &prog.insn[prog.n]
        ins.op, ins.part, ins.num, ins.count = op, part, num, count
        ins.key = <const unsigned char*>PyBytes_AS_STRING(key)
        ins.klen = PyBytes_GET_SIZE(key)
        ins.raw = <const unsigned char*>PyBytes_AS_STRING(raw)
        ins.rlen = PyBytes_GET_SIZE(raw)
        prog.n += 1
    return 0


cdef inline Py_ssize_t _string_end(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n,
                                   bint* escaped) noexcept nogil:
    """Just past the string opening at s[pos] (stored text is valid JSON: only quotes and
    escapes matter); -1 if it does not end. Sets ``escaped`` when it holds a backslash."""
    cdef unsigned char c
    pos += 1
    while pos < n:
        c = s[pos]
        if c == c'"':
            return pos + 1
        if c == c'\\':
            escaped[0] = True
            pos += 2
        else:
            pos += 1
    return -1


cdef Py_ssize_t _skip_value(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    """Just past the value at s[pos], or -1. The text was checked when it was written, so
    this only follows strings and brackets (a fraction of _scan_value's work)."""
    cdef unsigned char c = s[pos]
    cdef Py_ssize_t depth = 0
    cdef bint esc = False
    if c == c'"':
        return _string_end(s, pos, n, &esc)
    if c == c'{' or c == c'[':
        while pos < n:
            c = s[pos]
            if c == c'"':
                pos = _string_end(s, pos, n, &esc)
                if pos < 0:
                    return -1
                continue
            if c == c'{' or c == c'[':
                depth += 1
            elif c == c'}' or c == c']':
                depth -= 1
                if depth == 0:
                    return pos + 1
            pos += 1
        return -1
    while pos < n:
        c = s[pos]
        if c == c',' or c == c'}' or c == c']' or c == c' ' or c == c'\n' or c == c'\r' or c == c'\t':
            break
        pos += 1
    return pos


cdef int _member_walk(const unsigned char* s, Py_ssize_t n, const unsigned char* key,
                      Py_ssize_t klen, Py_ssize_t* vstart, Py_ssize_t* vend) noexcept nogil:
    """Find top-level member ``key`` (its quoted JSON text) of the JSON object s[0:n] by
    walking every member: _member's answer where an escaped key could be the member,
    _UNKNOWN if any key holds an escape."""
    cdef Py_ssize_t pos = _ws(s, 0, n), kend, v
    cdef int found = _NO
    cdef bint escaped = False, matched
    if pos >= n or s[pos] != c'{':
        return _NO
    pos = _ws(s, pos + 1, n)
    if pos < n and s[pos] == c'}':
        return _NO
    while True:
        if pos >= n or s[pos] != c'"':
            return _UNKNOWN
        kend = _string_end(s, pos, n, &escaped)
        if kend < 0:
            return _UNKNOWN
        matched = kend - pos == klen and memcmp(s + pos, key, klen) == 0
        pos = _ws(s, kend, n)
        if pos >= n or s[pos] != c':':
            return _UNKNOWN
        pos = _ws(s, pos + 1, n)
        if pos >= n:
            return _UNKNOWN
        v = _skip_value(s, pos, n)
        if v < 0:
            return _UNKNOWN
        if matched:
            found, vstart[0], vend[0] = _YES, pos, v
        pos = _ws(s, v, n)
        if pos < n and s[pos] == c',':
            pos = _ws(s, pos + 1, n)
            continue
        if pos < n and s[pos] == c'}':
            break
        return _UNKNOWN
    if escaped:  # the member may hide behind an escaped key: only the predicate knows
        return _UNKNOWN
    return found


cdef inline Py_ssize_t _quoted_end(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    """Just past the string opening at s[pos], or -1; plain runs skipped 16 bytes at a time
    (not _plain_run: its word and byte loops, after a 16-byte step that stopped, cost as
    much again on the short strings of a small record; near the end this is a byte loop)."""
    cdef unsigned char c
    pos += 1
    while True:
        pos = topics_plain_run16(s, pos, n)
        if pos >= n:
            return -1
        c = s[pos]
        if c == c'"':
            return pos + 1
        pos += 2 if c == c'\\' else 1


cdef inline Py_ssize_t _walk_to(const unsigned char* s, Py_ssize_t pos, Py_ssize_t to, Py_ssize_t n,
                                Py_ssize_t* depth) noexcept nogil:
    """Follow the text from pos (outside any string) up to ``to``, counting brackets into
    ``depth``: ``to`` when it is outside every string, past it when a string covers it,
    -1 when the text does not scan."""
    cdef unsigned char c
    while pos < to:
        c = s[pos]
        if c == c'"':
            pos = _quoted_end(s, pos, n)
            if pos < 0:
                return -1
            continue
        if c == c'{' or c == c'[':
            depth[0] += 1
        elif c == c'}' or c == c']':
            depth[0] -= 1
        pos += 1
    return pos


cdef int _member(const unsigned char* s, Py_ssize_t n, const unsigned char* key, Py_ssize_t klen,
                 Py_ssize_t* vstart, Py_ssize_t* vend) noexcept nogil:
    """Find top-level member ``key`` (its quoted JSON text, no escapes) of the JSON object
    s[0:n], the last one as a decoder keeps: _YES with its value's span, _NO when absent
    (or not an object), _UNKNOWN when an escaped key could be it or the text does not scan.

    Only the key's occurrences are looked at: each is checked to be a top-level key by
    following the text from the last one (a nested one has depth > 1, one inside a string
    is passed over by the string, a value is not followed by ':'), and the text after the
    last member found is only searched, not walked. An escape can hide the key only in a
    key after that member (an earlier one is overridden), so only then is every member
    walked (_member_walk)."""
    cdef Py_ssize_t pos = _ws(s, 0, n), depth = 0, hit, at, v, e, clean = 0
    cdef int found = _NO
    if pos >= n or s[pos] != c'{':
        return _NO
    hit = topics_find(s, pos + 1, n, key, klen)
    while hit >= 0:
        pos = _walk_to(s, pos, hit, n, &depth)
        if pos < 0:
            return _UNKNOWN
        if pos == hit and depth == 1:
            at = _ws(s, hit + klen, n)
            if at < n and s[at] == c':':
                v = _ws(s, at + 1, n)
                if v >= n:
                    return _UNKNOWN
                e = _skip_value(s, v, n)
                if e < 0:
                    return _UNKNOWN
                found, vstart[0], vend[0] = _YES, v, e
                pos = clean = e
        hit = topics_find(s, pos if pos > hit else hit + 1, n, key, klen)
    if memchr(s + clean, c'\\', n - clean) != NULL:
        return _member_walk(s, n, key, klen, vstart, vend)
    return found


cdef int _number_of(const unsigned char* s, Py_ssize_t n, double* out) noexcept nogil:
    """A JSON number's value: _YES, _NO (not a number), _UNKNOWN (not exact as a double:
    an integer past 2**53, which the predicate compares as a Python int, or a fraction or
    exponent longer than 15 characters)."""
    cdef char buf[32]
    cdef char* end
    cdef Py_ssize_t k = 0
    cdef int64_t acc = 0
    cdef bint neg
    if n == 0 or not (s[0] == c'-' or c'0' <= s[0] <= c'9'):
        return _NO
    neg = s[0] == c'-'
    k = neg
    # An integer (the common case) without strtod; 18 digits cannot overflow int64.
    while k < n and k - neg < 18 and c'0' <= s[k] <= c'9':
        acc = acc * 10 + (s[k] - c'0')
        k += 1
    if k == n and n > neg:
        if acc > (<int64_t>1 << 53):  # topics/_where.py _EXACT_FLOAT
            return _UNKNOWN
        out[0] = <double>(-acc if neg else acc)
        return _YES
    if n > 15:
        return _UNKNOWN
    memcpy(buf, s, n)
    buf[n] = 0
    out[0] = strtod(buf, &end)
    if end != buf + n or not isfinite(out[0]):
        return _UNKNOWN
    return _YES


cdef int _leaf(const _Insn* ins, const unsigned char* f) noexcept nogil:
    cdef Py_ssize_t nlen = _ld16(f + 10), tlen = _ld16(f + 12)
    cdef Py_ssize_t mlen = _ld32(f + 16), dlen = _ld32(f + 20), size, a = 0, b = 0
    cdef const unsigned char* span
    cdef const unsigned char* body = f + _HEADER
    cdef int found
    cdef double x
    if ins.part == 1 or ins.part == 2:  # node / tag: the raw bytes (absent: length 0)
        if ins.part == 1:
            span, size = body, nlen
        else:
            span, size = body + nlen, tlen
        if ins.op == _P_EXISTS:
            return _YES if size else _NO
        if ins.count or size == 0:  # a non-string operand, or no tag/node: never equal
            return _NO
        if ins.op == _P_EQ_RAW:
            return _YES if size == ins.rlen and memcmp(span, ins.raw, size) == 0 else _NO
        if ins.op == _P_PREFIX:
            return _YES if size >= ins.rlen and memcmp(span, ins.raw, ins.rlen) == 0 else _NO
        return _NO
    if ins.part == 4:
        span, size = body + nlen + tlen, mlen
    else:
        span, size = body + nlen + tlen + mlen, dlen
    if size == 0:
        return _NO
    found = _member(span, size, ins.key, ins.klen, &a, &b)
    if found != _YES:
        return found
    if ins.op == _P_EXISTS:
        return _YES
    span, size = span + a, b - a
    if ins.op == _P_EQ_RAW or ins.op == _P_PREFIX:
        if span[0] == c'"' and memchr(span, c'\\', size) != NULL:
            return _UNKNOWN  # an escaped string: the predicate decodes it
        if ins.op == _P_EQ_RAW:
            return _YES if size == ins.rlen and memcmp(span, ins.raw, size) == 0 else _NO
        return _YES if size > ins.rlen and memcmp(span, ins.raw, ins.rlen) == 0 else _NO
    found = _number_of(span, size, &x)
    if found != _YES:
        return found
    if ins.op == _P_EQ_NUM:
        return x == ins.num
    if ins.op == _P_GT:
        return x > ins.num
    if ins.op == _P_GE:
        return x >= ins.num
    if ins.op == _P_LT:
        return x < ins.num
    return x <= ins.num


cdef int _run_program(const _Program* prog, const unsigned char* f) noexcept nogil:
    """_YES / _NO / _UNKNOWN for frame f (a postfix program over three-valued logic)."""
    cdef unsigned char stack[_P_MAX]
    cdef Py_ssize_t sp = 0, k, j
    cdef const _Insn* ins
    cdef int v, acc
    for k in range(prog.n):
        ins = &prog.insn[k]
        if ins.op == _P_NOT:
            v = stack[sp - 1]
            stack[sp - 1] = v if v == _UNKNOWN else 1 - v
        elif ins.op == _P_AND or ins.op == _P_OR:
            acc = _YES if ins.op == _P_AND else _NO
            for j in range(sp - ins.count, sp):
                v = stack[j]
                if ins.op == _P_AND:
                    if v == _NO or acc == _NO:
                        acc = _NO
                    elif v == _UNKNOWN:
                        acc = _UNKNOWN
                else:
                    if v == _YES or acc == _YES:
                        acc = _YES
                    elif v == _UNKNOWN:
                        acc = _UNKNOWN
            sp -= ins.count
            stack[sp] = acc
            sp += 1
        else:
            stack[sp] = _leaf(ins, f)
            sp += 1
    return stack[0] if sp else _UNKNOWN


cdef int _keep_frame(object keep, int parts, const _Needles* needles, const _Program* prog,
                     const unsigned char* f) except -1:
    """1 when a where predicate keeps frame f: its needles, then its program, decide in C;
    only what they leave open calls the predicate, with just the parts it reads. Out of
    the render loop so a plain read's loop stays as small as it was."""
    cdef Py_ssize_t nlen = _ld16(f + 10), tlen = _ld16(f + 12), mlen = _ld32(f + 16)
    cdef int verdict
    if needles.n and _lacks_needle(needles, f):
        return 0
    if prog != NULL and prog.n:
        verdict = _run_program(prog, f)
        if verdict != _UNKNOWN:
            return verdict
    return 1 if keep(
        PyBytes_FromStringAndSize(<const char*>f + _HEADER, nlen) if parts & 1 and nlen else None,
        PyBytes_FromStringAndSize(<const char*>f + _HEADER + nlen, tlen) if parts & 2 and tlen else None,
        PyBytes_FromStringAndSize(<const char*>f + _HEADER + nlen + tlen, mlen) if parts & 4 and mlen else None,
        PyBytes_FromStringAndSize(<const char*>f + _HEADER + nlen + tlen + mlen, _ld32(f + 20)) if parts & 8 else None,
    ) else 0


cdef inline bint _in_skip_list(const _SkipList* skip, const unsigned char* node, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(skip.n):
        if skip.size[k] == n and memcmp(skip.ptr[k], node, n) == 0:
            return True
    return False


# --- the segment --------------------------------------------------------------------

cdef class _SegmentView


cdef class SegmentBuffer:
    """SegmentBuffer(base_seq, salt)
--

An in-memory run of record frames with consecutive seqs; see _ext.pyi."""

    cdef unsigned char* _buf
    cdef size_t _nbytes, _cap
    cdef uint32_t* _offs
    cdef Py_ssize_t _count, _ocap
    cdef uint64_t _base_seq
    cdef uint32_t _salt
    cdef Py_ssize_t _live_count, _retired, _pins, _norphans
    cdef uint64_t _live_bytes
    cdef bint _sealed
    cdef void** _orphans

    def __init__(self, uint64_t base_seq, uint32_t salt):
        self._base_seq = base_seq
        self._salt = salt

    def __dealloc__(self):
        # No pins can remain: every view holds a reference to this object.
        self._free_orphans()
        free(self._buf)
        free(self._offs)

    # -- memory ----------------------------------------------------------------------

    cdef void _free_orphans(self) noexcept:
        cdef Py_ssize_t k
        for k in range(self._norphans):
            free(self._orphans[k])
        free(self._orphans)
        self._orphans, self._norphans = NULL, 0

    cdef void _pin(self) noexcept:
        self._pins += 1

    cdef void _unpin(self) noexcept:
        self._pins -= 1
        if self._pins == 0 and self._norphans:
            self._free_orphans()

    cdef int _resize(self, size_t cap) except -1:
        """Move the frames to a buffer of ``cap`` bytes (cap >= nbytes)."""
        cdef unsigned char* buf
        cdef void** orphans
        if self._pins == 0:
            buf = <unsigned char*>realloc(self._buf, cap if cap else 1)
            if buf == NULL:
                raise MemoryError()
        else:
            buf = <unsigned char*>malloc(cap if cap else 1)
            orphans = <void**>realloc(self._orphans, (self._norphans + 1) * sizeof(void*))
            if buf == NULL or orphans == NULL:
                free(buf)
                if orphans != NULL:
                    self._orphans = orphans
                raise MemoryError()
            if self._nbytes:  # _buf may be NULL, and memcpy(dst, NULL, 0) is undefined
                memcpy(buf, self._buf, self._nbytes)
            orphans[self._norphans] = self._buf
            self._orphans = orphans
            self._norphans += 1
        self._buf, self._cap = buf, cap
        return 0

    cdef int _reserve(self, size_t extra, Py_ssize_t frames, bint exact) except -1:
        cdef size_t need = self._nbytes + extra
        cdef Py_ssize_t ocap
        cdef uint32_t* offs
        if need > self._cap:
            self._resize(need if exact else max(need, self._cap + self._cap // 2, <size_t>_MIN_CAPACITY))
        if self._count + frames > self._ocap:
            ocap = self._count + frames if exact else max(self._count + frames, self._ocap + self._ocap // 2, 256)
            offs = <uint32_t*>realloc(self._offs, ocap * sizeof(uint32_t))
            if offs == NULL:
                raise MemoryError()
            self._offs, self._ocap = offs, ocap
        return 0

    cdef Py_ssize_t _extend(self, object frames, bint verify, bint private) except -1:
        """Validate and copy whole frames in (private: nobody else can see this segment
        yet, so the copy may run without the GIL)."""
        cdef Py_buffer view
        cdef _Walk w
        cdef Py_ssize_t k, i, count
        cdef size_t n, off = 0
        cdef uint32_t size
        cdef const unsigned char* src
        cdef unsigned char* dst
        _get_buffer(frames, &view)
        try:
            src, n = <const unsigned char*>view.buf, <size_t>view.len
            if n == 0:
                return 0
            while True:
                count = self._count
                w.check_seq = True
                w.first_seq = self._base_seq + <uint64_t>count
                w.seq_wrapped = count > 0 and w.first_seq <= self._base_seq
                w.check_ts = count > 0
                w.min_ts = self._last_ts()
                k = _walk_maybe_nogil(src, n, self._salt, verify, &w)
                # A long walk runs without the GIL; if another thread appended meanwhile,
                # the seqs we checked against are stale, so check again.
                if self._count == count:
                    break
            if k < 0:
                raise _walk_error(&w)
            if self._sealed and not private:
                raise ValueError("segment is sealed")
            if self._nbytes + n > 0xFFFFFFFF:
                raise ValueError("segment would exceed 4 GiB (u32 offsets)")
            self._reserve(n, k, private)
            dst = self._buf + self._nbytes
            if private and n >= _NOGIL_BYTES:
                with nogil:
                    memcpy(dst, src, n)
            else:
                memcpy(dst, src, n)
            for i in range(k):
                self._offs[self._count + i] = <uint32_t>(self._nbytes + off)
                size = _ld32(dst + off)
                if dst[off + size - 1] == 0:
                    self._live_count += 1
                    self._live_bytes += size
                off += size
            self._count += k
            self._nbytes += n
            return k
        finally:
            PyBuffer_Release(&view)

    # -- properties ------------------------------------------------------------------

    @property
    def base_seq(self):
        return self._base_seq

    @property
    def salt(self):
        return self._salt

    @property
    def count(self):
        """Frames held (live or not). The next seq this segment accepts is base_seq+count."""
        return self._count

    @property
    def nbytes(self):
        """Bytes of frames held."""
        return self._nbytes

    @property
    def live_count(self):
        return self._live_count

    @property
    def live_bytes(self):
        """Sum of frame_len over live frames."""
        return self._live_bytes

    @property
    def retired(self):
        """Index of the first non-retired frame (0..count)."""
        return self._retired

    @property
    def sealed(self):
        return self._sealed

    @property
    def last_ts(self):
        """ts of the last frame, or -1 when empty."""
        return self._last_ts()

    cdef int64_t _last_ts(self) noexcept:
        if self._count == 0:
            return -1
        return <int64_t>_ld64(self._buf + self._offs[self._count - 1] + 32)

    # -- frames ----------------------------------------------------------------------

    def append(self, frames):
        """Append whole frames (CRC not re-checked); see _ext.pyi."""
        if self._sealed:
            raise ValueError("segment is sealed")
        return self._extend(frames, False, False)

    def seal(self):
        """Freeze: shrink the buffers to fit; later appends raise ValueError."""
        cdef uint32_t* offs
        self._sealed = True
        if self._cap > self._nbytes:
            self._resize(self._nbytes)
        if self._ocap > self._count and self._count:
            offs = <uint32_t*>realloc(self._offs, self._count * sizeof(uint32_t))
            if offs != NULL:  # shrinking cannot really fail; keep the old block if it does
                self._offs, self._ocap = offs, self._count

    cdef unsigned char* _frame(self, Py_ssize_t i) except NULL:
        if i < 0 or i >= self._count:
            raise IndexError(f"frame index {i} out of range")
        return self._buf + self._offs[i]

    def frame_len(self, Py_ssize_t i):
        return _ld32(self._frame(i))

    def ts_at(self, Py_ssize_t i):
        return <int64_t>_ld64(self._frame(i) + 32)

    def tag_at(self, Py_ssize_t i):
        cdef const unsigned char* f = self._frame(i)
        cdef Py_ssize_t tlen = _ld16(f + 12)
        return PyBytes_FromStringAndSize(<const char*>f + _HEADER + _ld16(f + 10), tlen) if tlen else None

    def node_at(self, Py_ssize_t i):
        cdef const unsigned char* f = self._frame(i)
        cdef Py_ssize_t nlen = _ld16(f + 10)
        return PyBytes_FromStringAndSize(<const char*>f + _HEADER, nlen) if nlen else None

    cdef inline bint _live(self, Py_ssize_t i) noexcept:
        # i must be in [0, count).
        cdef const unsigned char* f = self._buf + self._offs[i]
        return i >= self._retired and f[_ld32(f) - 1] == 0

    def is_live(self, Py_ssize_t i):
        self._frame(i)
        return self._live(i)

    def offset_of(self, Py_ssize_t i):
        self._frame(i)
        return self._offs[i]

    def frame(self, Py_ssize_t i):
        """A copy of frame i's bytes (trailer included)."""
        cdef const unsigned char* f = self._frame(i)
        return PyBytes_FromStringAndSize(<const char*>f, _ld32(f))

    def decode(self, Py_ssize_t i):
        """(seq, ts_ms, node, tag, meta, data, live) of frame i (meta None when absent)."""
        cdef const unsigned char* f = self._frame(i)
        cdef Py_ssize_t nlen = _ld16(f + 10), tlen = _ld16(f + 12)
        cdef Py_ssize_t mlen = _ld32(f + 16), dlen = _ld32(f + 20)
        cdef const char* body = <const char*>f + _HEADER
        return (
            _ld64(f + 24),
            <int64_t>_ld64(f + 32),
            PyBytes_FromStringAndSize(body, nlen) if nlen else None,
            PyBytes_FromStringAndSize(body + nlen, tlen) if tlen else None,
            PyBytes_FromStringAndSize(body + nlen + tlen, mlen) if mlen else None,
            PyBytes_FromStringAndSize(body + nlen + tlen + mlen, dlen),
            self._live(i),
        )

    # -- liveness --------------------------------------------------------------------

    cdef uint32_t _unlive(self, Py_ssize_t i, TagTrie trie) except? 0:
        """Drop live frame i from the counters and its (tag, seq) from ``trie``."""
        cdef const unsigned char* f = self._buf + self._offs[i]
        cdef uint32_t size = _ld32(f)
        cdef Py_ssize_t tlen = _ld16(f + 12)
        self._live_count -= 1
        self._live_bytes -= size
        if trie is not None and tlen:
            # The tag pointer is into our (pinned) buffer; the trie copies what it keeps.
            trie._discard(f + _HEADER + _ld16(f + 10), tlen, self._base_seq + <uint64_t>i)
        return size

    def mark_deleted(self, Py_ssize_t i, TagTrie trie=None):
        """Flip frame i's trailer to deleted; return its frame_len if it was live, else 0."""
        cdef unsigned char* f = self._frame(i)
        cdef bint live = self._live(i)
        f[_ld32(f) - 1] = 1  # FLAG_DELETED
        if not live:
            return 0
        self._pin()
        try:
            return self._unlive(i, trie)
        finally:
            self._unpin()

    def retire_to(self, Py_ssize_t i, TagTrie trie=None):
        """Retire indexes [retired, i) (i clamped to [retired, count]); see _ext.pyi."""
        cdef Py_ssize_t j, frames = 0, last = -1
        cdef uint64_t nbytes = 0
        cdef Py_ssize_t stop = min(max(i, self._retired), self._count)
        self._pin()
        try:
            for j in range(self._retired, stop):
                if self._live(j):
                    frames += 1
                    nbytes += self._unlive(j, trie)
                    last = j
        finally:
            self._unpin()
        self._retired = stop
        return frames, nbytes, last

    def first_live(self, Py_ssize_t start):
        """First live index >= max(start, retired); count if none."""
        cdef Py_ssize_t i = max(start, self._retired)
        while i < self._count and not self._live(i):
            i += 1
        return min(i, self._count)

    def first_ts_at_least(self, int64_t ts_ms):
        """First index whose ts >= ts_ms (binary search; ts is non-decreasing); count if none."""
        cdef Py_ssize_t lo = 0, hi = self._count, mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if <int64_t>_ld64(self._buf + self._offs[mid] + 32) < ts_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # -- render ----------------------------------------------------------------------

    def render(self, Py_ssize_t start, Py_ssize_t limit, Py_ssize_t max_bytes, skip_nodes, int flags,
               Py_ssize_t stop=-1, keep=None):
        """Render live records from index max(start, retired) as JSON objects joined by ","."""
        cdef Py_ssize_t count = self._count if stop < 0 else min(stop, self._count)
        cdef Py_ssize_t i = min(max(start, self._retired), count)
        cdef Py_ssize_t examined = 0, emitted = 0, total = -1, k, nlen
        cdef uint32_t* picked
        cdef const unsigned char* f
        cdef const unsigned char* buf
        cdef unsigned char* q
        cdef _SkipList skip
        cdef bint use_in = False
        cdef int parts = keep.parts if keep is not None else 0
        cdef _Needles needles
        cdef _Program* prog = NULL
        if limit <= 0 or i >= count:
            return b"", 0, 0, i
        if skip_nodes:
            use_in = not _skip_list(skip_nodes, &skip)
        else:
            skip.n = 0
        needles.n = 0
        if keep is not None:
            _needles(keep, &needles)
            if getattr(keep, "program", None):
                prog = <_Program*>malloc(sizeof(_Program))
                if prog == NULL:
                    raise MemoryError()
                try:
                    _load_program(keep, prog)
                except BaseException:
                    free(prog)
                    raise
        picked = <uint32_t*>malloc(min(limit, count - i) * sizeof(uint32_t))
        if picked == NULL:
            free(prog)
            raise MemoryError()
        # Pinned: ``in`` below may run Python code that appends to this segment, and the
        # copy loop runs without the GIL; either way ``buf`` must stay where it is.
        self._pin()
        try:
            buf = self._buf
            while i < count and examined < limit:
                f = buf + self._offs[i]
                i += 1
                if f[_ld32(f) - 1] != 0:
                    continue
                examined += 1
                nlen = _ld16(f + 10)
                if nlen and (_in_skip_list(&skip, f + _HEADER, nlen) or use_in
                             and PyBytes_FromStringAndSize(<const char*>f + _HEADER, nlen) in skip_nodes):
                    continue
                if keep is not None and not _keep_frame(keep, parts, &needles, prog, f):
                    continue
                total += _record_size(f, flags) + 1
                picked[emitted] = self._offs[i - 1]
                emitted += 1
                if total >= max_bytes:
                    break
            if emitted == 0:
                return b"", 0, examined, i
            fragment = PyBytes_FromStringAndSize(NULL, total)
            q = <unsigned char*>PyBytes_AS_STRING(fragment)
            if total < _NOGIL_BYTES:
                _put_records(q, buf, picked, emitted, flags)
            else:
                with nogil:
                    _put_records(q, buf, picked, emitted, flags)
            return fragment, emitted, examined, i
        finally:
            self._unpin()
            free(picked)
            free(prog)

    # -- whole buffer ----------------------------------------------------------------

    def view(self):
        """Read-only view of the frame bytes [0:nbytes] (what a segment file holds)."""
        cdef _SegmentView exporter = _SegmentView.__new__(_SegmentView)
        exporter.seg = self
        return memoryview(exporter)

    @classmethod
    def from_frames(cls, buf, uint64_t base_seq, uint32_t salt, bint verify=True):
        """Rebuild a segment from frame bytes (e.g. read back from disk); see _ext.pyi."""
        segment = cls(base_seq, salt)
        if not isinstance(segment, SegmentBuffer):
            raise TypeError("from_frames needs a SegmentBuffer subclass")
        (<SegmentBuffer>segment)._extend(buf, verify, True)  # checked just above
        return segment


cdef class _SegmentView:
    """Buffer exporter behind SegmentBuffer.view(): pins the frames while a view lives."""

    cdef SegmentBuffer seg

    def __getbuffer__(self, Py_buffer* view, int flags):
        cdef SegmentBuffer seg = self.seg
        cdef void* buf = <void*>seg._buf if seg._buf != NULL else <void*>_EMPTY
        PyBuffer_FillInfo(view, self, buf, seg._nbytes, 1, flags)  # refuses writable requests
        seg._pin()

    def __releasebuffer__(self, Py_buffer* view):
        self.seg._unpin()
