# encode_batch: records to frames; included into _ext.pyx.

# --- encode_batch -------------------------------------------------------------------
#
# Three passes over a batch:
#   1. _fetch every record's data/meta/tag/node (new references, so a dumps() that runs
#      user code and mutates the caller's records cannot free them under us). A record
#      that is not a mapping or lacks "data" (or whose mapping raises) stops this pass;
#      its error is raised only after the records before it have been checked, since an
#      earlier record's later check (a bad tag, say) must win.
#   2. With a dumps known to write a list as "[" + ",".join(texts of each value) + "]"
#      (ujson's), encode all data values in one dumps(list) call and all dict metas in
#      another, and split each result per value (_split_array), which also runs the
#      json_check rules over every value. Per-call overhead dominates dumps() on small
#      values, so this roughly halves its cost. If the batch call raises or returns
#      something unusable, or its text does not split cleanly into one valid value per
#      element (NaN or Infinity anywhere, say), pass 3 calls dumps() once per value
#      instead: that path finds and reports the failing record exactly as before.
#      One difference remains, with ujson's __json__ hook (whose text ujson writes
#      verbatim): hook texts that are not one JSON value each but happen to line up into
#      valid elements again (say '"a' and 'b"' and '1,2') are not caught in a batch.
#   3. _check_record each record in order (data, meta, tag, node, size), then write.
#
# A client's batch (server_meta given) also has its meta refused when a top-level key
# begins with "$": the server stamps its own facts there (topics/_meta_keys.py). The
# JSON scan of each meta, which every write makes anyway, notes such a key as it passes
# (_scan_value's ``reserved``), so the refusal costs no pass of its own.

# The dumps functions pass 2 is used with, matched by identity. Within ujson's output for
# a list, each value's text is exactly what ujson makes of that value alone (no indent, no
# separator spaces), so the split stores the bytes the per-record path would. Any other
# dumps goes through the per-record path, keeping exactly what it makes of each value:
# json.dumps writes ", " between elements, and indent= re-indents nested values.
import json as _json

cdef object _UJSON_DUMPS = None
cdef object _UJSON_ENCODE = None
try:
    import ujson as _ujson
except ImportError:  # pragma: no cover - ujson is a dependency
    pass
else:
    _UJSON_DUMPS, _UJSON_ENCODE = _ujson.dumps, _ujson.encode
    del _ujson

ctypedef struct _Limits:
    Py_ssize_t record, meta, keys, tag, node

ctypedef struct _Rec:
    const char* node
    const char* tag
    const char* meta
    const char* data
    Py_ssize_t node_len, tag_len, meta_len, data_len

cdef enum:
    _DATA = 0
    _META = 1
    _TAG = 2
    _NODE = 3

ctypedef struct _Fields:
    # New references to one record's data/meta/tag/node, indexed by _DATA.._NODE (None
    # where absent); NULL until fetched.
    PyObject* v[4]

ctypedef struct _Dumped:
    # One dumps(list) result split per value: value j's JSON is base[spans[j].start:][:size]
    # for j < valid, where valid is all of them or (no batch call made, or its text did not
    # split cleanly) 0; values from ``valid`` on go through dumps() one by one. ``next`` is
    # the index of the value pass 3 asks for next.
    const char* base
    _Span* spans
    Py_ssize_t valid, next

ctypedef struct _Node:
    # The default node's checked UTF-8, once a record has used it (size -1 before).
    const char* ptr
    Py_ssize_t size

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


cdef inline bint _is_buffer(object value) noexcept:
    return PyBytes_Check(value) or PyByteArray_Check(value) or PyMemoryView_Check(value)


cdef inline object _raw_json(object value):
    """A bytes/bytearray/memoryview as bytes we can point into (copied unless bytes)."""
    if PyBytes_Check(value):
        return value
    return memoryview(value).tobytes()  # an immutable copy


cdef object _dumps_json(object value, Py_ssize_t index, str field, object dumps):
    """What ``dumps`` made of ``value`` (str with its UTF-8 cached, or bytes)."""
    cdef Py_ssize_t size
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


cdef Py_ssize_t _checked(const char* p, Py_ssize_t n, Py_ssize_t index, str field,
                         Py_ssize_t* reserved) except -2:
    cdef Py_ssize_t members
    cdef Py_ssize_t err = _scan(p, n, &members, reserved)
    if err >= 0:
        raise _record_error(
            index, field, "json", _json_message(<const unsigned char*>p, n, err)
        )
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


cdef enum:
    # Exact dicts with up to this many items are read in one pass over their items, which
    # is cheaper than four lookups (most records hold one to three keys).
    _SCAN_ITEMS = 8


cdef inline int _field_slot(PyObject* key) noexcept:
    """0..3 when ``key`` is the str "data"/"meta"/"tag"/"node", 4 for any other exact
    str, -1 when only a real lookup can tell (another type or a non-compact str)."""
    cdef Py_ssize_t size
    cdef const char* p
    if not PyUnicode_CheckExact(key):
        return -1
    size = PyUnicode_GET_LENGTH_P(key)
    if size != 3 and size != 4:
        return 4
    if not PyUnicode_IS_COMPACT_ASCII(key):
        return -1
    p = <const char*>PyUnicode_DATA(key)
    if size == 3:
        return 2 if memcmp(p, b"tag", 3) == 0 else 4
    if memcmp(p, b"data", 4) == 0:
        return 0
    if memcmp(p, b"meta", 4) == 0:
        return 1
    return 3 if memcmp(p, b"node", 4) == 0 else 4


cdef bint _scan_items(object record, PyObject** slots) noexcept:
    """Fill slots[0:4] (borrowed; NULL = absent) from a small exact dict whose keys are
    all exact str, as lookups would (str keys compare by value). False if it cannot."""
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* value
    cdef int slot
    if PyDict_GET_SIZE(record) > _SCAN_ITEMS:
        return False
    slots[0] = slots[1] = slots[2] = slots[3] = NULL
    # No Python code runs in this loop, so the dict cannot change under it.
    while PyDict_Next(record, &pos, &key, &value):
        slot = _field_slot(key)
        if slot < 0:
            return False
        if slot < 4:
            slots[slot] = value
    return True


cdef int _fetch(object record, Py_ssize_t index, _Fields* f) except -1:
    """Pass 1: take new references to a record's data/meta/tag/node."""
    cdef PyObject* found
    cdef PyObject* slots[4]
    cdef int k
    if PyDict_CheckExact(record) and _scan_items(record, slots):
        if slots[0] == NULL:
            raise _record_error(index, "data", "missing")
        for k in range(4):
            _keep(&f.v[k], <object>slots[k] if slots[k] != NULL else None)
        return 0
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
    _keep(&f.v[_DATA], data)
    _keep(&f.v[_META], meta)
    _keep(&f.v[_TAG], tag)
    _keep(&f.v[_NODE], node)
    return 0


cdef object _dump_all(const _Fields* fields, Py_ssize_t nrec, bint meta, object dumps,
                      _Dumped* out):
    """Pass 2: one dumps() call over every data value (meta False) or dict meta (True) of
    fields[0:nrec] that pass 3 would otherwise dumps() one by one, split into ``out``.
    Returns the text ``out`` points into (the caller keeps it alive), or None."""
    cdef Py_ssize_t i, size, count
    cdef const char* p
    cdef list values = []
    for i in range(nrec):
        value = <object>fields[i].v[_META if meta else _DATA]
        if (PyDict_Check(value) if meta else value is not None and not _is_buffer(value)):
            values.append(value)
    if not values:
        return None
    try:
        text = dumps(values)
        if PyBytes_Check(text):
            p, size = PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text)
        elif PyUnicode_Check(text):
            p = PyUnicode_AsUTF8AndSize(text, &size)
        else:
            return None
    except Exception:
        # Which value failed is for the per-record path to find: it raises the first
        # failing record's error (or this same exception) exactly as it always has.
        return None
    count = len(values)
    out.spans = <_Span*>malloc(count * sizeof(_Span))
    if out.spans == NULL:
        raise MemoryError()
    out.base = p
    if size < _NOGIL_BYTES:
        out.valid = _split_array(<const unsigned char*>p, size, count, out.spans)
    else:
        with nogil:
            out.valid = _split_array(<const unsigned char*>p, size, count, out.spans)
    return text


cdef inline const _Span* _take(_Dumped* d) noexcept:
    """The next batch-encoded value's span, or NULL when it must go through dumps()."""
    cdef Py_ssize_t j = d.next
    d.next += 1
    return &d.spans[j] if j < d.valid else NULL


cdef int _refuse_reserved(Py_ssize_t index, const char* p, Py_ssize_t n,
                          Py_ssize_t at) except -1:
    """Raise the refusal of a meta whose top-level key at offset ``at`` (its opening
    quote, in checked JSON) begins with "$", naming the key as a reader decodes it.
    Called from two places, which keeps this rare path out of line."""
    cdef Py_ssize_t end = _scan_string(<const unsigned char*>p, at, n)
    key = _json.loads(PyBytes_FromStringAndSize(p + at, end - at))
    detail = f'has the key "{key}": top-level meta keys beginning with "$" are the server\'s'
    raise _record_error(index, "meta", "meta_reserved", detail)


cdef int _check_meta(object meta, Py_ssize_t index, const _Limits* lim, object dumps,
                     _Dumped* dm, _Rec* rec, PyObject** keep, object server_meta) except -1:
    cdef Py_ssize_t keys, reserved
    cdef const _Span* span = NULL
    if PyDict_Check(meta):
        span = _take(dm)
    elif not _is_buffer(meta):
        raise _record_error(index, "meta", "type")
    if span != NULL:
        rec.meta, rec.meta_len = dm.base + span.start, span.size
    else:
        text = _raw_json(meta) if _is_buffer(meta) else _dumps_json(meta, index, "meta", dumps)
        _keep(keep, text)
        rec.meta = _utf8(text, &rec.meta_len)
    if rec.meta_len > lim.meta:
        raise _record_error(index, "meta", "too_large")
    # A "$" key means the meta is an object, so its refusal comes after the type check
    # wherever it is made.
    if span != NULL:
        keys = span.members
        if span.reserved >= 0 and server_meta is not None and type(meta) is not server_meta:
            _refuse_reserved(index, rec.meta, rec.meta_len, span.reserved - span.start)
    else:
        keys = _checked(rec.meta, rec.meta_len, index, "meta", &reserved)
        if reserved >= 0 and server_meta is not None and type(meta) is not server_meta:
            _refuse_reserved(index, rec.meta, rec.meta_len, reserved)
    if keys < 0:
        raise _record_error(index, "meta", "type")
    if keys > lim.keys:
        raise _record_error(index, "meta", "meta_keys")
    return 0


cdef int _check_record(const _Fields* f, Py_ssize_t index, object default_node,
                       const _Limits* lim, object dumps, _Dumped* dd, _Dumped* dm,
                       _Node* dflt, _Rec* rec, PyObject** keep, list tags,
                       object server_meta) except -1:
    """Pass 3: validate one record (order: data, meta, tag, node, size) and point ``rec``
    at its parts. ``keep`` (2 slots) receives new references to the texts made here for
    data and meta; the rest points into ``f``'s values, default_node or pass 2's texts."""
    cdef const _Span* span
    cdef Py_ssize_t unused
    data = <object>f.v[_DATA]
    if data is None:
        rec.data, rec.data_len = "null", 4
    elif _is_buffer(data):
        text = _raw_json(data)
        _keep(keep, text)
        rec.data = _utf8(text, &rec.data_len)
        _checked(rec.data, rec.data_len, index, "data", &unused)
    else:
        span = _take(dd)
        if span != NULL:  # already checked by _split_array
            rec.data, rec.data_len = dd.base + span.start, span.size
        else:
            text = _dumps_json(data, index, "data", dumps)
            _keep(keep, text)
            rec.data = _utf8(text, &rec.data_len)
            _checked(rec.data, rec.data_len, index, "data", &unused)
    if <object>f.v[_META] is not None:
        _check_meta(<object>f.v[_META], index, lim, dumps, dm, rec, keep + 1, server_meta)
    _name(<object>f.v[_TAG], index, "tag", lim.tag, &rec.tag, &rec.tag_len)
    if rec.tag_len:
        tag_bytes = PyBytes_FromStringAndSize(rec.tag, rec.tag_len)
        # Unchecked list store: ``tags`` has one slot per record and index < len(records).
        tags[index] = tag_bytes
        rec.tag = PyBytes_AS_STRING(tag_bytes)
    node = <object>f.v[_NODE]
    if node is None:
        node = default_node
        if dflt.size >= 0:  # checked before (a check has no side effects, so skip it)
            rec.node, rec.node_len = dflt.ptr, dflt.size
        else:
            _name(node, index, "node", lim.node, &rec.node, &rec.node_len)
            dflt.ptr, dflt.size = rec.node, rec.node_len
    else:
        _name(node, index, "node", lim.node, &rec.node, &rec.node_len)
    if rec.data_len + rec.meta_len > lim.record:
        raise _record_error(index, "record", "too_large")
    return 0


cdef unsigned char* _write_frame(unsigned char* p, const _Rec* rec, uint64_t seq, int64_t ts,
                                 uint32_t salt) noexcept nogil:
    # The narrowing length casts hold: _check_record checked node/tag against limits
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
    _st32(p + 4, topics_frame_crc(salt, p, size))
    return p + size


cdef void _write_frames(unsigned char* out, const _Rec* recs, Py_ssize_t n, uint64_t first_seq,
                        int64_t ts, uint32_t salt) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        out = _write_frame(out, &recs[i], first_seq + <uint64_t>i, ts, salt)


@cython.boundscheck(False)  # batch[i] with i < len(batch) of a tuple we own
@cython.wraparound(False)
def encode_batch(records, uint64_t first_seq, int64_t ts_ms, default_node, uint32_t salt,
                 tuple limits not None, dumps, server_meta=None):
    """Validate and encode a write batch into concatenated record frames; see _ext.pyi."""
    cdef _Limits lim = _parse_limits(limits)
    if server_meta is not None and not isinstance(server_meta, type):
        raise TypeError("server_meta must be a type or None")
    # A snapshot: dumps() may run code that mutates the caller's list while we work.
    cdef tuple batch = tuple(records)
    cdef Py_ssize_t n = len(batch), i = 0, stop, total = 0
    cdef int k
    cdef bint tagged = False
    cdef _Rec* recs
    cdef _Fields* fields
    cdef PyObject** keep
    cdef unsigned char* out
    cdef _Dumped dd, dm
    cdef _Node dflt
    if n == 0:
        return b"", None
    if <uint64_t>(n - 1) > UINT64_MAX - first_seq:
        raise OverflowError("seq overflows u64")
    cdef list tags = [None] * n
    dd.base = dm.base = NULL
    dd.spans = dm.spans = NULL
    dd.valid = dm.valid = dd.next = dm.next = 0
    dflt.ptr, dflt.size = NULL, -1
    recs = <_Rec*>calloc(n, sizeof(_Rec))
    fields = <_Fields*>calloc(n, sizeof(_Fields))
    keep = <PyObject**>calloc(2 * n, sizeof(PyObject*))
    try:
        if recs == NULL or fields == NULL or keep == NULL:
            raise MemoryError()
        stop, error = n, None
        try:
            while i < n:
                _fetch(batch[i], i, &fields[i])
                i += 1
        except Exception as exc:  # raised below, after the records before it
            stop, error = i, exc
        data_text = meta_text = None  # what dd/dm point into; alive until we return
        if dumps is not None and (dumps is _UJSON_DUMPS or dumps is _UJSON_ENCODE):
            data_text = _dump_all(fields, stop, False, dumps, &dd)
            meta_text = _dump_all(fields, stop, True, dumps, &dm)
        for i in range(stop):
            _check_record(&fields[i], i, default_node, &lim, dumps, &dd, &dm, &dflt,
                          &recs[i], keep + 2 * i, tags, server_meta)
            total += _MIN_FRAME + recs[i].node_len + recs[i].tag_len + recs[i].meta_len + recs[i].data_len
            tagged |= recs[i].tag_len > 0
        if error is not None:
            raise error
        frames = PyBytes_FromStringAndSize(NULL, total)
        out = <unsigned char*>PyBytes_AS_STRING(frames)
        if total < _NOGIL_BYTES:
            _write_frames(out, recs, n, first_seq, ts_ms, salt)
        else:
            with nogil:
                _write_frames(out, recs, n, first_seq, ts_ms, salt)
        return frames, (tags if tagged else None)
    finally:
        if fields != NULL:
            for i in range(n):
                for k in range(4):
                    Py_XDECREF(fields[i].v[k])
        if keep != NULL:
            for i in range(2 * n):
                Py_XDECREF(keep[i])
        free(dd.spans)
        free(dm.spans)
        free(keep)
        free(fields)
        free(recs)
