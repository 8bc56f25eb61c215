# data_fields: typed columns from top-level data members; included into _columns.pyx.

# --- typed data fields ------------------------------------------------------------------
#
# ``data_fields`` reads chosen top-level members of each record's data object into typed
# columns, the flat part of the Spark data source's ``data_schema`` (nested and decimal
# fields go through pyarrow's JSON reader instead). See _columns.pyi for the contract.

from libc.stdlib cimport strtod

KIND_BOOL = 1
KIND_INT = 2
KIND_FLOAT = 3
KIND_STRING = 4
KIND_TEXT = 5

cdef enum:
    MAX_FIELDS = 64
    NOT_OBJECT = -2


cdef struct Field:
    const char *name
    Py_ssize_t size
    int kind
    Out valid   # one byte per row: 1 = a value, 0 = NULL
    Out vals    # int64 / double / uint8 per row, or text bytes
    Out offs    # int32 per row + 1 (text kinds)


cdef Py_ssize_t _number_end(const unsigned char *b, Py_ssize_t pos, Py_ssize_t n) noexcept nogil:
    while pos < n and (0x30 <= b[pos] <= 0x39 or b[pos] == 0x2D or b[pos] == 0x2B
                       or b[pos] == 0x2E or b[pos] == 0x65 or b[pos] == 0x45):
        pos += 1
    return pos


cdef int _field_value(State *s, Field *f, Py_ssize_t pos, Py_ssize_t *out_end) noexcept nogil:
    """Read one member value into ``f`` (without closing the row): 1 = a value, 0 =
    null, -1 = a value of the wrong type (or a parse fault)."""
    cdef const unsigned char *b = s.b
    cdef Py_ssize_t end, k
    cdef int64_t iv = 0
    cdef uint64_t mag = 0, limit, digit
    cdef double dv
    cdef char tmp[64]
    cdef unsigned char ch = b[pos]
    cdef bint neg
    if ch == 0x6E:  # null
        out_end[0] = pos + 4
        return 0
    if f.kind == 1:  # boolean
        if ch == 0x74:
            out_end[0] = pos + 4
            ch = 1
        elif ch == 0x66:
            out_end[0] = pos + 5
            ch = 0
        else:
            return -1
        return 1 if _put(&f.vals, &ch, 1) == 0 else -1
    if f.kind == 2 or f.kind == 3:  # integer / floating
        if not (ch == 0x2D or 0x30 <= ch <= 0x39):
            return -1
        end = _number_end(b, pos, s.n)
        out_end[0] = end
        if f.kind == 2:
            neg = ch == 0x2D
            k = pos + 1 if neg else pos
            limit = <uint64_t>INT64_MAX + (1 if neg else 0)
            if k == end:
                return -1
            while k < end:
                if not 0x30 <= b[k] <= 0x39:
                    return -1  # a fraction or an exponent: not an integer
                digit = b[k] - 0x30
                if mag > (limit - digit) // 10:
                    return -1  # out of int64's range
                mag = mag * 10 + digit
                k += 1
            iv = <int64_t>(<uint64_t>0 - mag) if neg else <int64_t>mag  # two's complement
            return 1 if _put(&f.vals, &iv, 8) == 0 else -1
        if end - pos >= 63:
            return -1
        memcpy(tmp, b + pos, end - pos)
        tmp[end - pos] = 0
        dv = strtod(tmp, NULL)
        return 1 if _put(&f.vals, &dv, 8) == 0 else -1
    # text kinds: a string is unescaped; STRING keeps any other value's JSON text
    if ch == 0x22:
        end = _string(s, pos, &f.vals)
        if end < 0:
            return -1
        out_end[0] = end
        return 1
    if f.kind == 5:
        return -1
    end = _skip(s, pos)
    if end < 0:
        return -1
    out_end[0] = end
    return 1 if _put(&f.vals, b + pos, end - pos) == 0 else -1


cdef int _close_field(Field *f, int state) noexcept nogil:
    """End a row of ``f``: NULL unless ``state`` is 1 (values were written then)."""
    cdef unsigned char v = 1 if state == 1 else 0
    cdef int64_t zero = 0
    cdef int32_t off
    if _put(&f.valid, &v, 1) < 0:
        return -1
    if f.kind == 4 or f.kind == 5:
        off = <int32_t>f.vals.len
        return _put(&f.offs, &off, 4)
    if state != 1:  # a placeholder value under a NULL
        return _put(&f.vals, &zero, 1 if f.kind == 1 else 8)
    return 0


cdef int _data_row(State *s, Field *fields, int nf, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """One data text [pos, end): -1 when ok, NOT_OBJECT, or the index of a field whose
    value has the wrong type (its row and every other field's are closed as NULL)."""
    cdef const unsigned char *b = s.b
    cdef int states[MAX_FIELDS]
    cdef Py_ssize_t marks[MAX_FIELDS]
    cdef Py_ssize_t key, key_end, vend = 0
    cdef int i, k, bad = -1, r
    for i in range(nf):
        states[i] = 0
        marks[i] = fields[i].vals.len
    s.n = end
    pos = _ws(b, pos, end)
    if pos >= end or b[pos] != 0x7B:
        bad = NOT_OBJECT
    else:
        pos = _ws(b, pos + 1, end)
        if pos < end and b[pos] == 0x7D:
            pos = end
        while pos < end and bad == -1:
            if b[pos] != 0x22:
                bad = NOT_OBJECT
                break
            key = pos + 1
            key_end = _string_end(s, pos)
            if key_end < 0:
                bad = NOT_OBJECT
                break
            pos = _ws(b, key_end, end)
            if pos >= end or b[pos] != 0x3A:
                bad = NOT_OBJECT
                break
            pos = _ws(b, pos + 1, end)
            if pos >= end:
                bad = NOT_OBJECT
                break
            k = -1
            for i in range(nf):  # raw key bytes: an escaped key never matches
                if fields[i].size == key_end - 1 - key and memcmp(
                    fields[i].name, b + key, fields[i].size
                ) == 0:
                    k = i
            if k < 0:
                vend = _skip(s, pos)
                if vend < 0:
                    bad = NOT_OBJECT
                    break
            else:
                fields[k].vals.len = marks[k]  # a repeated key: the last one wins
                r = _field_value(s, &fields[k], pos, &vend)
                if r < 0:
                    bad = k
                    break
                states[k] = r
            pos = _ws(b, vend, end)
            if pos < end and b[pos] == 0x2C:
                pos = _ws(b, pos + 1, end)
            elif pos < end and b[pos] == 0x7D:
                break
            else:
                bad = NOT_OBJECT
    s.err = NULL
    for i in range(nf):
        if bad != -1:
            fields[i].vals.len = marks[i]
            states[i] = 0
        if _close_field(&fields[i], states[i]) < 0:
            return -3
    return bad


def data_fields(offsets, values, Py_ssize_t first, Py_ssize_t rows, list spec):
    """Typed columns of top-level data members; see _columns.pyi."""
    cdef Py_buffer ov, vv
    cdef State s
    cdef Field fields[MAX_FIELDS]
    cdef int nf = len(spec), i, r
    cdef int32_t *offs
    cdef int32_t zero = 0
    cdef Py_ssize_t row
    cdef Out bad
    if nf > MAX_FIELDS:
        raise ValueError(f"at most {MAX_FIELDS} fields")
    memset(&s, 0, sizeof(State))
    memset(fields, 0, sizeof(fields))
    memset(&bad, 0, sizeof(Out))
    names = [name.encode() for name, _ in spec]
    PyObject_GetBuffer(offsets, &ov, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(values, &vv, PyBUF_SIMPLE)
        try:
            if first < 0 or rows < 0 or (first + rows + 1) * 4 > ov.len:
                raise ValueError("offsets too short for the rows")
            offs = <int32_t *>ov.buf
            for i in range(nf):
                fields[i].name = names[i]
                fields[i].size = len(names[i])
                fields[i].kind = spec[i][1]
                if fields[i].kind < 1 or fields[i].kind > 5:
                    raise ValueError(f"unknown kind {fields[i].kind}")
                if fields[i].kind >= 4 and _put(&fields[i].offs, &zero, 4) < 0:
                    raise MemoryError()
            for row in range(first, first + rows):
                if not 0 <= offs[row] <= offs[row + 1] <= vv.len:
                    raise ValueError("offsets outside the values")
            s.b = <const unsigned char *>vv.buf
            # Both buffers are held by the views and nothing else runs meanwhile.
            with nogil:
                for row in range(first, first + rows):
                    r = _data_row(&s, fields, nf, offs[row], offs[row + 1])
                    if r == -3 or _put(&bad, &r, 4) < 0:
                        break
            if bad.len != rows * 4:
                raise MemoryError()
            out = []
            for i in range(nf):
                out.append((
                    _bytes(&fields[i].valid),
                    _bytes(&fields[i].vals),
                    _bytes(&fields[i].offs) if fields[i].kind >= 4 else None,
                ))
            return _bytes(&bad), out
        finally:
            PyBuffer_Release(&vv)
    finally:
        PyBuffer_Release(&ov)
        free(bad.p)
        for i in range(nf):
            free(fields[i].valid.p)
            free(fields[i].vals.p)
            free(fields[i].offs.p)
