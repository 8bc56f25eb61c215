# The write body: records and top-level fields; included into _scan.pyx.

# --- the write body -------------------------------------------------------------------


cdef dict _record(Cur *c, Py_ssize_t pos, Py_ssize_t index, Py_ssize_t *out_end):
    """Split the record object opening at ``pos``."""
    cdef const unsigned char *b = c.buf
    cdef Py_ssize_t n = c.n, key_start, key_end = 0, end = 0
    cdef int esc, kind, k
    cdef dict rec = {}
    cdef object key, value
    pos = _ws(b, pos + 1, n)
    if pos >= n:
        raise BodyError(_PROBLEMS[E_EOF], _record_path(index), n)
    if b[pos] == 0x7D:
        out_end[0] = pos + 1
        return rec
    while True:
        key_start = pos
        esc = 0
        pos = _key(c, pos, &key_end, &esc)
        if pos < 0:
            raise _error(c, _record_path(index))
        if esc:
            key = _text(c, key_start, key_end, 1)
            kind = K_OTHER
            for k in range(K_DATA, K_NODE + 1):
                if key == _KEYS[k]:
                    kind = k
        else:
            kind = _record_kind(b + key_start + 1, key_end - key_start - 2)
            key = _KEYS[kind] if kind != K_OTHER else _text(c, key_start, key_end, 0)
        if kind == K_DATA or kind == K_META:
            end = _skip(c, pos)
            if end < 0:
                raise _error(c, member_path(_record_path(index), key))
            if b[pos] == 0x6E:  # null: the engine treats None as absent
                value = None
            else:
                value = PyBytes_FromStringAndSize(<const char *>b + pos, end - pos)
        else:
            value = _value(c, pos, &end)
            if value is _FAIL:
                raise _error(c, member_path(_record_path(index), key))
        rec[key] = value
        pos = _ws(b, end, n)
        if pos >= n:
            raise BodyError(_PROBLEMS[E_EOF], _record_path(index), n)
        if b[pos] == 0x7D:
            out_end[0] = pos + 1
            return rec
        if b[pos] != 0x2C:
            raise BodyError(_PROBLEMS[E_OBJECT_END], _record_path(index), pos)
        pos = _ws(b, pos + 1, n)


cdef tuple _records(Cur *c, Py_ssize_t pos, Py_ssize_t *out_end):
    """Split the "records" value at ``pos``: (records or None, pending shape error)."""
    cdef const unsigned char *b = c.buf
    cdef Py_ssize_t n = c.n, index = 0, end = 0
    cdef list out = []
    cdef object pending = None
    path = "$.records"
    if pos >= n:
        raise BodyError(_PROBLEMS[E_EOF], path, n)
    if b[pos] != 0x5B:
        pending = BodyError(_PROBLEMS[E_RECORDS], path, pos)
        end = _skip(c, pos)
        if end < 0:
            raise _error(c, path)
        out_end[0] = end
        return None, pending
    pos = _ws(b, pos + 1, n)
    if pos >= n:
        raise BodyError(_PROBLEMS[E_EOF], path, n)
    if b[pos] == 0x5D:
        out_end[0] = pos + 1
        return out, None
    while True:
        if pos >= n:
            raise BodyError(_PROBLEMS[E_EOF], _record_path(index), n)
        if b[pos] == 0x7B:
            out.append(_record(c, pos, index, &end))
        else:
            if pending is None:
                pending = BodyError(_PROBLEMS[E_RECORD], _record_path(index), pos)
            end = _skip(c, pos)
            if end < 0:
                raise _error(c, _record_path(index))
        pos = _ws(b, end, n)
        if pos >= n:
            raise BodyError(_PROBLEMS[E_EOF], path, n)
        if b[pos] == 0x5D:
            out_end[0] = pos + 1
            return (out if pending is None else None), pending
        if b[pos] != 0x2C:
            raise BodyError(_PROBLEMS[E_ARRAY_END], path, pos)
        pos = _ws(b, pos + 1, n)
        index += 1


cdef tuple _body(Cur *c):
    cdef const unsigned char *b = c.buf
    cdef Py_ssize_t n = c.n, pos, key_start, key_end = 0, end = 0
    cdef int esc
    cdef dict fields = {}
    cdef object records = None, pending = None, key, value
    pos = _ws(b, 0, n)
    if pos >= n:
        raise BodyError(_PROBLEMS[E_EOF], "$", n)
    if b[pos] != 0x7B:
        raise BodyError(_PROBLEMS[E_NOT_OBJECT], "$", pos)
    pos = _ws(b, pos + 1, n)
    if pos >= n:
        raise BodyError(_PROBLEMS[E_EOF], "$", n)
    if b[pos] == 0x7D:
        pos += 1
    else:
        while True:
            key_start = pos
            esc = 0
            pos = _key(c, pos, &key_end, &esc)
            if pos < 0:
                raise _error(c, "$")
            if esc or key_end - key_start != 9 or memcmp(b + key_start + 1, b"records", 7):
                key = _text(c, key_start, key_end, esc)
            else:
                key = "records"
            if key == "records":
                records, pending = _records(c, pos, &end)
            else:
                value = _value(c, pos, &end)
                if value is _FAIL:
                    raise _error(c, member_path("$", key))
                fields[key] = value
            pos = _ws(b, end, n)
            if pos >= n:
                raise BodyError(_PROBLEMS[E_EOF], "$", n)
            if b[pos] == 0x7D:
                pos += 1
                break
            if b[pos] != 0x2C:
                raise BodyError(_PROBLEMS[E_OBJECT_END], "$", pos)
            pos = _ws(b, pos + 1, n)
    pos = _ws(b, pos, n)
    if pos != n:
        raise BodyError(_PROBLEMS[E_TRAILING], "$", pos)
    if pending is not None:
        raise pending
    return records, fields


def split_write_body(body):
    """Split a JSON write body into (records, fields) without re-encoding payloads.

    ``records`` is None when the body has no "records" member, else one dict per record:
    "data"/"meta" -> the raw JSON text bytes of the value (None for JSON null), every
    other member decoded. ``fields`` holds the other top-level members, decoded.
    Raises BodyError (a ValueError) for anything that is not such a body, TypeError
    for a ``body`` that is not bytes-like.
    """
    cdef bytes buf
    cdef Cur c
    if type(body) is bytes:
        buf = <bytes>body
    elif isinstance(body, (bytes, bytearray, memoryview)):
        # A private copy: nothing else can resize or rewrite it while we hold pointers.
        buf = bytes(body)
    else:
        raise TypeError(f"body must be bytes, bytearray or memoryview, not {type(body).__name__}")
    c.buf = <const unsigned char *>PyBytes_AS_STRING(buf)
    c.n = PyBytes_GET_SIZE(buf)
    c.err = 0
    c.err_pos = 0
    return _body(&c)
