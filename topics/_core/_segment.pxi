# SegmentBuffer; included into _ext.pyx after its render path (_render.pxi) and the
# filters a read applies (_read_filter.pxi, _where.pxi).
#
# Frames live in one malloc'd buffer (grown by 1.5x while active, shrunk to fit by
# seal()) with a u32 offset per frame. Views handed out by view() and stretches of code
# that hold raw pointers across a GIL release "pin" the buffer: while pinned, a growth
# copies into a fresh buffer and parks the old one as an orphan, freed at the last unpin,
# so a pointer or memoryview never dangles.

cdef enum:
    _MIN_CAPACITY = 16384

cdef char _EMPTY[1]


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
