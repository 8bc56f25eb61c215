# Where programs run in C (topics/_where.py rule 6); included into _ext.pyx.

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
    _P_IN_RAW = 9
    _P_AND = 10
    _P_OR = 11
    _P_NOT = 12
    _P_IN_NUM = 13
    _P_MAX = 192
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


cdef int _in_raw(const _Insn* ins, const unsigned char* s, Py_ssize_t n) noexcept nogil:
    """_YES when s[0:n] is one of an ``In``'s ``count`` strings: ``raw`` holds count + 1
    uint32 offsets, then their UTF-8 bytes sorted (topics/_where_program.py ``_in_raw``),
    so this is a binary search, not a comparison per value."""
    cdef Py_ssize_t lo = 0, hi = ins.count, mid, m, c
    cdef uint32_t a, b
    cdef const unsigned char* texts = ins.raw + 4 * (ins.count + 1)
    while lo < hi:
        mid = (lo + hi) // 2
        memcpy(&a, ins.raw + 4 * mid, 4)
        memcpy(&b, ins.raw + 4 * (mid + 1), 4)
        m = b - a
        c = memcmp(texts + a, s, m if m < n else n)
        if c == 0:
            c = m - n
        if c == 0:
            return _YES
        if c < 0:
            lo = mid + 1
        else:
            hi = mid
    return _NO


cdef int _in_num(const _Insn* ins, double x) noexcept nogil:
    """_YES when x is one of an ``In``'s ``count`` numbers (``raw``: sorted doubles)."""
    cdef Py_ssize_t lo = 0, hi = ins.count, mid
    cdef double v
    while lo < hi:
        mid = (lo + hi) // 2
        memcpy(&v, ins.raw + 8 * mid, 8)
        if v == x:
            return _YES
        if v < x:
            lo = mid + 1
        else:
            hi = mid
    return _NO


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
        if ins.op == _P_IN_RAW:
            return _in_raw(ins, span, size) if size else _NO
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
    if ins.op == _P_EQ_RAW or ins.op == _P_PREFIX or ins.op == _P_IN_RAW:
        if span[0] == c'"' and memchr(span, c'\\', size) != NULL:
            return _UNKNOWN  # an escaped string: the predicate decodes it
        if ins.op == _P_IN_RAW:  # strings, compared without their quotes
            return _in_raw(ins, span + 1, size - 2) if span[0] == c'"' else _NO
        if ins.op == _P_EQ_RAW:
            return _YES if size == ins.rlen and memcmp(span, ins.raw, size) == 0 else _NO
        return _YES if size > ins.rlen and memcmp(span, ins.raw, ins.rlen) == 0 else _NO
    found = _number_of(span, size, &x)
    if found != _YES:
        return found
    if ins.op == _P_EQ_NUM:
        return x == ins.num
    if ins.op == _P_IN_NUM:
        return _in_num(ins, x)
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
