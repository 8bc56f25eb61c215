# JSON syntax check (RFC 8259) over raw bytes; included into _ext.pyx.
#
# Everything here is `nogil` and works on a pointer + length the caller keeps alive. The
# scanner mirrors _pure.json_check step for step so both report the same offset: the
# first byte that cannot continue a valid document (the lead byte of a bad UTF-8
# sequence). Helpers return the position after what they scanned, or ~offset (< 0) on
# error, so one signed integer carries both outcomes.

cdef enum:
    _MAX_DEPTH = 512
    # A number whose integer part has more digits is refused: it is beyond every IEEE
    # double (a JavaScript reader gets Infinity), and Python's int() stops at 4300 digits,
    # so a 5000-digit integer failed every reader that decoded it (issue #30, I-JSON's
    # RFC 7493 section 2.2). Fractions and exponents parse as floats, in linear time.
    _MAX_INT_DIGITS = 308

# String bytes: 0 plain ASCII, 1 '"', 2 '\\', 3 control (< 0x20), 4 start of UTF-8.
cdef unsigned char _STR_CLASS[256]
cdef unsigned char _IS_HEX[256]
cdef unsigned char _SIMPLE_ESCAPE[256]  # the byte after '\\' in \" \\ \/ \b \f \n \r \t


cdef void _init_json_tables() noexcept:
    cdef int c
    for c in range(256):
        _STR_CLASS[c] = 3 if c < 0x20 else 4 if c >= 0x80 else 0
        _IS_HEX[c] = (c'0' <= c <= c'9') or (c'a' <= c <= c'f') or (c'A' <= c <= c'F')
        _SIMPLE_ESCAPE[c] = 0
    _STR_CLASS[c'"'] = 1
    _STR_CLASS[c'\\'] = 2
    for c in b'"\\/bfnrt':
        _SIMPLE_ESCAPE[c] = 1


_init_json_tables()

_NUMBER_RULE = "a number with more than 308 integer digits (I-JSON: beyond any double)"
_SURROGATE_RULE = "a lone UTF-16 surrogate escape (I-JSON: no reader can decode it)"


cdef inline uint64_t _zero_bytes(uint64_t v) noexcept nogil:
    # High bit set in (at least) every zero byte of v; false positives only occur above
    # a true zero byte, so a non-zero result always means "some byte is zero".
    return (v - 0x0101010101010101ULL) & ~v & 0x8080808080808080ULL


cdef extern from *:
    """
    /* 16 string bytes at a time where SSE2 exists (all x86-64): the offset of the first
       byte from pos that is '"', '\\', < 0x20 or >= 0x80 (the signed compare against 0x20
       catches both of the last two), or the last offset with fewer than 16 bytes left. */
    #if defined(__SSE2__)
    #include <emmintrin.h>
    static inline Py_ssize_t topics_plain_run16(const unsigned char *s, Py_ssize_t pos,
                                                Py_ssize_t n) {
        const __m128i quote = _mm_set1_epi8(0x22), bslash = _mm_set1_epi8(0x5C);
        const __m128i space = _mm_set1_epi8(0x20);
        for (; pos + 16 <= n; pos += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(s + pos));
            __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote),
                                                    _mm_cmpeq_epi8(v, bslash)),
                                       _mm_cmplt_epi8(v, space));
            int mask = _mm_movemask_epi8(hit);
            if (mask) return pos + __builtin_ctz((unsigned)mask);
        }
        return pos;
    }
    #else
    static inline Py_ssize_t topics_plain_run16(const unsigned char *s, Py_ssize_t pos,
                                                Py_ssize_t n) {
        (void)s;
        (void)n;
        return pos;
    }
    #endif
    """
    Py_ssize_t topics_plain_run16(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n) noexcept nogil


cdef inline Py_ssize_t _plain_run(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    """Skip string bytes that need no attention (printable ASCII except '"' and '\\')."""
    cdef uint64_t v
    pos = topics_plain_run16(s, pos, n)
    while pos + 8 <= n:
        memcpy(&v, s + pos, 8)
        # Flags bytes < 0x20 (the subtraction borrows), >= 0x80, '"' and '\\'. Byte order
        # does not matter: any flag stops the word loop and the byte loop finds the spot.
        if ((v - 0x2020202020202020ULL) | v | _zero_bytes(v ^ 0x2222222222222222ULL)
                | _zero_bytes(v ^ 0x5C5C5C5C5C5C5C5CULL)) & 0x8080808080808080ULL:
            break
        pos += 8
    while pos < n and _STR_CLASS[s[pos]] == 0:
        pos += 1
    return pos


cdef inline Py_ssize_t _utf8_next(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    """Position after the well-formed UTF-8 sequence at pos (lead >= 0x80), or -1."""
    cdef unsigned char c = s[pos], lo = 0x80, hi = 0xBF
    cdef Py_ssize_t need, k
    if c < 0xC2 or c > 0xF4:  # continuation bytes, overlong 2-byte leads, > U+10FFFF
        return -1
    if c < 0xE0:
        need = 1
    elif c < 0xF0:
        need = 2
        if c == 0xE0:
            lo = 0xA0  # overlong
        elif c == 0xED:
            hi = 0x9F  # UTF-16 surrogates
    else:
        need = 3
        if c == 0xF0:
            lo = 0x90  # overlong
        elif c == 0xF4:
            hi = 0x8F  # > U+10FFFF
    if pos + need >= n or s[pos + 1] < lo or s[pos + 1] > hi:
        return -1
    for k in range(pos + 2, pos + need + 1):
        if s[k] & 0xC0 != 0x80:
            return -1
    return pos + need + 1


cdef inline Py_ssize_t _ws(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    while pos < n and (s[pos] == c' ' or s[pos] == c'\n' or s[pos] == c'\r' or s[pos] == c'\t'):
        pos += 1
    return pos


cdef inline int _hex_value(unsigned char c) noexcept nogil:
    if c <= c'9':
        return c - c'0'
    return (c | 0x20) - c'a' + 10


cdef inline int _code_unit(const unsigned char* s, Py_ssize_t pos) noexcept nogil:
    """The UTF-16 code unit of the \\uXXXX escape at pos (its four hex digits checked)."""
    return (_hex_value(s[pos + 2]) << 12 | _hex_value(s[pos + 3]) << 8
            | _hex_value(s[pos + 4]) << 4 | _hex_value(s[pos + 5]))


cdef Py_ssize_t _surrogates(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    """Past the \\uXXXX escape at pos, or ~(pos + 1) when it is a lone surrogate (I-JSON,
    RFC 7493 section 2.1: a high surrogate must be followed by a \\u low one, and a low one
    must follow a high one). A lone surrogate has no Unicode scalar value, so no reader
    could decode it to text: it is refused at write like bad UTF-8. The error is at the
    escape's "u", where no other error can be, so _json_message can name the rule."""
    cdef int unit = _code_unit(s, pos), low
    cdef Py_ssize_t k
    if unit < 0xD800 or unit > 0xDFFF:
        return pos + 6
    if unit >= 0xDC00 or pos + 12 > n or s[pos + 6] != c'\\' or s[pos + 7] != c'u':
        return ~(pos + 1)
    for k in range(pos + 8, pos + 12):
        if not _IS_HEX[s[k]]:
            return ~(pos + 1)
    low = _code_unit(s, pos + 6)
    if low < 0xDC00 or low > 0xDFFF:
        return ~(pos + 1)
    return pos + 12


cdef Py_ssize_t _scan_string(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    """s[pos] is an opening quote."""
    cdef unsigned char kind
    cdef Py_ssize_t k
    pos += 1
    while True:
        pos = _plain_run(s, pos, n)
        if pos >= n:
            return ~n
        kind = _STR_CLASS[s[pos]]
        if kind == 1:
            return pos + 1
        if kind == 3:
            return ~pos
        if kind == 4:
            k = _utf8_next(s, pos, n)
            if k < 0:
                return ~pos
            pos = k
            continue
        if pos + 1 >= n:
            return ~n
        if s[pos + 1] == c'u':
            for k in range(pos + 2, pos + 6):
                if k >= n:
                    return ~n
                if not _IS_HEX[s[k]]:
                    return ~k
            pos = _surrogates(s, pos, n)
            if pos < 0:
                return pos
        elif _SIMPLE_ESCAPE[s[pos + 1]]:
            pos += 2
        else:
            return ~(pos + 1)


cdef inline Py_ssize_t _digits(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    while pos < n and c'0' <= s[pos] <= c'9':
        pos += 1
    return pos


cdef Py_ssize_t _scan_number(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    """Scan a number; an error at its first integer digit past _MAX_INT_DIGITS when its
    integer part is longer (no other error can follow that many digits, so
    _json_message can name the rule)."""
    cdef Py_ssize_t stop
    if s[pos] == c'-':
        pos += 1
    if pos < n and s[pos] == c'0':
        pos += 1
    elif pos < n and c'1' <= s[pos] <= c'9':
        stop = _digits(s, pos + 1, n)
        if stop - pos > _MAX_INT_DIGITS:
            return ~(pos + _MAX_INT_DIGITS)
        pos = stop
    else:
        return ~pos
    if pos < n and s[pos] == c'.':
        stop = _digits(s, pos + 1, n)
        if stop == pos + 1:
            return ~stop
        pos = stop
    if pos < n and (s[pos] == c'e' or s[pos] == c'E'):
        pos += 1
        if pos < n and (s[pos] == c'+' or s[pos] == c'-'):
            pos += 1
        stop = _digits(s, pos, n)
        if stop == pos:
            return ~pos
        pos = stop
    return pos


cdef Py_ssize_t _scan_literal(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    cdef const char* word
    cdef Py_ssize_t k, size
    if s[pos] == c't':
        word, size = b"true", 4
    elif s[pos] == c'f':
        word, size = b"false", 5
    elif s[pos] == c'n':
        word, size = b"null", 4
    else:
        return ~pos
    for k in range(size):
        if pos + k >= n:
            return ~n
        if s[pos + k] != <unsigned char>word[k]:
            return ~(pos + k)
    return pos + size


cdef Py_ssize_t _scan_key(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    """Scan `"key" :` at pos; return the position of the member's value."""
    if pos >= n:
        return ~n
    if s[pos] != c'"':
        return ~pos
    pos = _scan_string(s, pos, n)
    if pos < 0:
        return pos
    pos = _ws(s, pos, n)
    if pos >= n:
        return ~n
    if s[pos] != c':':
        return ~pos
    return _ws(s, pos + 1, n)


cdef inline bint _dollar_key(const unsigned char* s, Py_ssize_t pos) noexcept nogil:
    """Whether the checked key string at pos (its opening quote) begins with "$", written
    plainly or as the escape \\u0024 (the only escape that decodes to "$")."""
    if s[pos + 1] == c'$':
        return True
    return (s[pos + 1] == c'\\' and s[pos + 2] == c'u' and s[pos + 3] == c'0'
            and s[pos + 4] == c'0' and s[pos + 5] == c'2' and s[pos + 6] == c'4')


cdef Py_ssize_t _scan_value(const unsigned char* s, Py_ssize_t pos, Py_ssize_t n,
                            Py_ssize_t* members, Py_ssize_t* reserved) noexcept nogil:
    """Scan the one JSON value that starts at s[pos] (no whitespace skipped before it).

    Returns the position just after the value, or ~offset of the first bad byte. Stops at
    the value's last byte whatever follows, so a value inside a larger text (an array
    element) scans exactly as it would on its own; the nesting limit counts from here.
    members receives the value's member count when it is an object, else -1; reserved
    the offset of its first top-level key that begins with "$" (the key's opening quote),
    else -1. That costs a byte test per top-level key in the pass the scan makes anyway,
    so the encoder can refuse server-owned meta keys without a walk of its own.
    Iterative with an explicit bracket stack, so deep input cannot exhaust the C stack.
    """
    cdef unsigned char stack[_MAX_DEPTH]
    cdef Py_ssize_t depth = 0
    cdef unsigned char c
    cdef Py_ssize_t key
    members[0] = reserved[0] = -1
    while True:
        if pos >= n:
            return ~n
        c = s[pos]
        if c == c'[' or c == c'{':
            if depth >= _MAX_DEPTH:
                return ~pos
            stack[depth] = c
            depth += 1
            if c == c'{' and depth == 1:
                members[0] = 0
            pos = _ws(s, pos + 1, n)
            if pos < n and s[pos] == c + 2:  # ']' / '}' follow '[' / '{' by 2
                depth -= 1
                pos += 1
            else:
                if c == c'{':
                    key, pos = pos, _scan_key(s, pos, n)
                    if pos < 0:
                        return pos
                    members[0] += depth == 1
                    if depth == 1 and _dollar_key(s, key) and reserved[0] < 0:
                        reserved[0] = key
                continue
        elif c == c'"':
            pos = _scan_string(s, pos, n)
        elif c == c'-' or c'0' <= c <= c'9':
            pos = _scan_number(s, pos, n)
        else:
            pos = _scan_literal(s, pos, n)
        if pos < 0:
            return pos
        while True:  # after a value: close containers until a ',' or the end
            if depth == 0:
                return pos
            pos = _ws(s, pos, n)
            if pos >= n:
                return ~n
            if s[pos] == c',':
                pos = _ws(s, pos + 1, n)
                if stack[depth - 1] == c'{':
                    key, pos = pos, _scan_key(s, pos, n)
                    if pos < 0:
                        return pos
                    members[0] += depth == 1
                    if depth == 1 and _dollar_key(s, key) and reserved[0] < 0:
                        reserved[0] = key
                break
            if s[pos] != stack[depth - 1] + 2:
                return ~pos
            depth -= 1
            pos += 1


cdef Py_ssize_t _json_scan(const unsigned char* s, Py_ssize_t n, Py_ssize_t* members,
                           Py_ssize_t* reserved) noexcept nogil:
    """-1 when s[0:n] is exactly one JSON value, else the offset of the first bad byte.

    members and reserved receive what _scan_value finds (meaningful only without error).
    """
    cdef Py_ssize_t pos = _scan_value(s, _ws(s, 0, n), n, members, reserved)
    if pos < 0:
        return ~pos
    pos = _ws(s, pos, n)
    return -1 if pos == n else pos


ctypedef struct _Span:
    Py_ssize_t start, size, members, reserved


cdef Py_ssize_t _split_array(const unsigned char* s, Py_ssize_t n, Py_ssize_t count,
                             _Span* spans) noexcept nogil:
    """Split what dumps() made of a list of ``count`` values into one span per value.

    The encoders this is used with write a list as "[" + ",".join(texts) + "]", each text
    exactly what they make of that value alone; a span runs from just after one delimiter
    to just before the next (whitespace included, as a standalone text would have it), and
    must hold exactly one valid JSON value (the json_check rules; its member count goes to
    spans[j].members, its first "$" key's offset within the text to spans[j].reserved). Returns count when the whole text splits cleanly into ``count``
    such spans, else 0: an element that does not check (NaN or Infinity, say), a missing
    delimiter or a wrong count means the values go through dumps() one by one, and that
    path reports the failing record exactly. (No prefix is trusted: a text from ujson's
    verbatim __json__ hook that holds a ',' shifts every span after it.)
    """
    cdef Py_ssize_t j, pos = 0, end
    if count == 0 or n == 0 or s[0] != c'[':
        return 0
    for j in range(count):
        end = _scan_value(s, _ws(s, pos + 1, n), n, &spans[j].members, &spans[j].reserved)
        if end < 0:
            return 0
        end = _ws(s, end, n)
        if end >= n or s[end] != (c',' if j + 1 < count else c']'):
            return 0
        spans[j].start, spans[j].size = pos + 1, end - pos - 1
        pos = end
    return count if pos == n - 1 else 0


cdef str _json_message(const unsigned char* s, Py_ssize_t n, Py_ssize_t err):
    """The error for a scan that failed at ``err``, naming the I-JSON rule when that is
    what failed (the offset alone would puzzle a client whose JSON is valid RFC 8259)."""
    cdef Py_ssize_t k
    if err >= 1 and err < n and s[err] == c'u' and s[err - 1] == c'\\':
        return f"invalid JSON at byte {err}: {_SURROGATE_RULE}"
    if err >= _MAX_INT_DIGITS and err < n and c'0' <= s[err] <= c'9':
        for k in range(err - _MAX_INT_DIGITS, err):
            if not c'0' <= s[k] <= c'9':
                return f"invalid JSON at byte {err}"
        return f"invalid JSON at byte {err}: {_NUMBER_RULE}"
    return f"invalid JSON at byte {err}"
