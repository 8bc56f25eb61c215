# A read's cheap filters: the skip list of node names and a where predicate's needles;
# included into _ext.pyx.

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


cdef inline bint _in_skip_list(const _SkipList* skip, const unsigned char* node, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(skip.n):
        if skip.size[k] == n and memcmp(skip.ptr[k], node, n) == 0:
            return True
    return False
