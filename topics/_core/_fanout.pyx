# cython: language_level=3
"""Compiled fan-out write (``topics._core._fanout``); interface in _fanout.pyi.

One frame to many non-blocking sockets: the loop that a live batch costs per idle watcher
once the frame is built. In Python each watcher paid a bound-method call, an ``os.write``
wrapper and its exception handling (about 1.5 us); here the loop is the system calls alone,
with the GIL released, so the other threads (the WAL writer's) run meanwhile.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.errno cimport EAGAIN, EINTR, errno
from libc.stdlib cimport free, malloc
from posix.unistd cimport write


def write_each(fds, data):
    """Write ``data`` to every descriptor of ``fds`` without blocking.

    Returns a list, per descriptor, of the bytes the kernel took: ``len(data)`` when all of
    it, fewer for a partial write, ``0`` when the socket's buffer is full (EAGAIN), ``-1``
    when the write failed otherwise (the peer is gone). An interrupted write is retried.
    """
    cdef Py_ssize_t n = len(fds)
    cdef Py_ssize_t i
    cdef Py_buffer view
    cdef int* cfds
    cdef ssize_t* taken
    cdef ssize_t r
    cdef const char* buf
    cdef size_t size
    out = [0] * n
    if n == 0:
        return out
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    cfds = <int*>malloc(n * sizeof(int))
    taken = <ssize_t*>malloc(n * sizeof(ssize_t))
    try:
        if cfds == NULL or taken == NULL:
            raise MemoryError()
        for i in range(n):
            cfds[i] = fds[i]
        buf = <const char*>view.buf
        size = <size_t>view.len
        with nogil:
            for i in range(n):
                while True:
                    r = write(cfds[i], buf, size)
                    if r >= 0:
                        break
                    if errno == EINTR:
                        continue
                    if errno == EAGAIN:  # EWOULDBLOCK is the same value on Linux
                        r = 0
                    else:
                        r = -1
                    break
                taken[i] = r
        for i in range(n):
            out[i] = taken[i]
        return out
    finally:
        free(cfds)
        free(taken)
        PyBuffer_Release(&view)
