# TagTrie: tag -> ascending seqs in a compressed radix tree; included into _ext.pyx.
#
# Mirrors _pure.TagTrie node for node. Each node keeps its own seqs in a malloc'd u64
# array read from ``head``, so dropping a tag's smallest seq (the common case: segments
# retire oldest-first) is O(1); the consumed head is compacted away lazily. ``total``
# counts the entries of the whole subtree, which makes count_prefix O(len(prefix)).


cdef class _TNode:
    cdef bytes label  # the edge from the parent; b"" only at the root
    cdef dict children  # first byte of the child's label -> _TNode
    cdef uint64_t* seqs
    cdef Py_ssize_t head, n, cap, total

    def __dealloc__(self):
        free(self.seqs)

    cdef inline Py_ssize_t size(self) noexcept:
        return self.n - self.head

    cdef inline unsigned char first(self) noexcept:
        # Only called on non-root nodes, whose labels are never empty.
        return <unsigned char>PyBytes_AS_STRING(self.label)[0]

    cdef Py_ssize_t bound(self, uint64_t seq) noexcept:
        """First index in [head, n) whose seq is >= seq (n if none)."""
        cdef Py_ssize_t lo = self.head, hi = self.n, mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if self.seqs[mid] < seq:
                lo = mid + 1
            else:
                hi = mid
        return lo

    cdef int reserve(self) except -1:
        cdef Py_ssize_t cap
        cdef uint64_t* seqs
        if self.n < self.cap:
            return 0
        cap = self.cap * 2 if self.cap else 4
        seqs = <uint64_t*>realloc(self.seqs, cap * sizeof(uint64_t))
        if seqs == NULL:
            raise MemoryError()
        self.seqs, self.cap = seqs, cap
        return 0

    cdef bint insert(self, uint64_t seq) except -1:
        """Add seq in order; False if it is already there."""
        cdef Py_ssize_t j
        self.reserve()
        if self.size() == 0 or seq > self.seqs[self.n - 1]:
            self.seqs[self.n] = seq
        else:
            j = self.bound(seq)
            if self.seqs[j] == seq:
                return False
            memmove(self.seqs + j + 1, self.seqs + j, (self.n - j) * sizeof(uint64_t))
            self.seqs[j] = seq
        self.n += 1
        return True

    cdef bint remove(self, uint64_t seq) noexcept:
        cdef Py_ssize_t j
        if self.size() and self.seqs[self.head] == seq:
            self.head += 1
            return True
        j = self.bound(seq)
        if j == self.n or self.seqs[j] != seq:
            return False
        memmove(self.seqs + j, self.seqs + j + 1, (self.n - j - 1) * sizeof(uint64_t))
        self.n -= 1
        return True

    cdef list take_below(self, uint64_t below, bint everything):
        cdef Py_ssize_t stop = self.n if everything else self.bound(below), k
        cdef list taken = [self.seqs[k] for k in range(self.head, stop)]
        self.head = stop
        self.compact()
        return taken

    cdef void compact(self) noexcept:
        # Amortised O(1): drop the consumed head once it is most of the array.
        if self.head == self.n:
            free(self.seqs)
            self.seqs, self.head, self.n, self.cap = NULL, 0, 0, 0
        elif self.head > 16 and self.head * 2 > self.n:
            memmove(self.seqs, self.seqs + self.head, (self.n - self.head) * sizeof(uint64_t))
            self.n -= self.head
            self.head = 0


cdef _TNode _new_node(bytes label):
    cdef _TNode node = _TNode.__new__(_TNode)
    node.label = label
    node.children = {}
    return node


cdef inline _TNode _child(_TNode node, unsigned char first):
    # Unchecked cast: children only ever holds _TNode values (or the key is absent).
    return <_TNode>node.children.get(first)


cdef bint _tidy(_TNode parent, _TNode node) except -1:
    """Keep the tree compressed: drop an empty leaf (returns True so the caller tidies
    the parent next) or merge an entry-less node into its only child."""
    cdef _TNode child
    if node.size():
        return False
    if not node.children:
        del parent.children[node.first()]
        return True
    if len(node.children) == 1:
        child = <_TNode>next(iter(node.children.values()))  # values are _TNode
        child.label = node.label + child.label
        parent.children[node.first()] = child
    return False


cdef inline _TNode _last(list path):
    # Paths are never empty (they start at the root) and hold only _TNode.
    return <_TNode>path[len(path) - 1]


cdef bint _below(object below, uint64_t* bound) except -1:
    """Translate ``seq < below`` to ``seq < bound``; True when every seq qualifies."""
    if below <= 0:
        bound[0] = 0
        return False
    if below > UINT64_MAX:
        bound[0] = UINT64_MAX
        return True
    bound[0] = below
    return False


cdef class TagTrie:
    """TagTrie()
--

Tag -> ascending seqs, with exact and trailing-prefix lookup; see _ext.pyi."""

    cdef _TNode _root
    cdef Py_ssize_t _len, _ntags

    def __init__(self):
        self.clear()

    def clear(self):
        self._root = _new_node(b"")
        self._len = 0
        self._ntags = 0

    def __len__(self):
        return self._len

    @property
    def ntags(self):
        return self._ntags

    cdef list _path(self, const unsigned char* key, Py_ssize_t n, bint prefix):
        """Nodes from the root to the node of key[0:n] or, for a prefix, to the topmost
        node whose tag starts with it; None when there is none."""
        cdef _TNode node = self._root, child
        cdef list path = [node]
        cdef Py_ssize_t pos = 0, size
        while pos < n:
            child = _child(node, key[pos])
            if child is None:
                return None
            size = PyBytes_GET_SIZE(child.label)
            if size <= n - pos and memcmp(PyBytes_AS_STRING(child.label), key + pos, size) == 0:
                pos += size
            elif prefix and size > n - pos and memcmp(PyBytes_AS_STRING(child.label), key + pos, n - pos) == 0:
                pos = n
            else:
                return None
            node = child
            path.append(node)
        return path

    cdef _TNode _descend_or_split(self, _TNode node, bytes key, Py_ssize_t pos):
        """The child of node on the way to key[pos:], split or created as needed."""
        cdef const unsigned char* k = <const unsigned char*>PyBytes_AS_STRING(key)
        cdef const unsigned char* label
        cdef _TNode child = _child(node, k[pos]), mid
        cdef Py_ssize_t common = 1, size, limit
        if child is None:
            child = _new_node(key[pos:])
            node.children[k[pos]] = child
            return child
        label = <const unsigned char*>PyBytes_AS_STRING(child.label)
        size = PyBytes_GET_SIZE(child.label)
        limit = min(size, PyBytes_GET_SIZE(key) - pos)
        while common < limit and label[common] == k[pos + common]:
            common += 1
        if common < size:
            mid = _new_node(child.label[:common])
            child.label = child.label[common:]  # frees the old label: ``label`` is dead now
            mid.children[child.first()] = child
            mid.total = child.total
            node.children[k[pos]] = mid
            child = mid
        return child

    cdef int _add(self, bytes tag, uint64_t seq) except -1:
        cdef _TNode node = self._root
        cdef list path = [node]
        cdef Py_ssize_t pos = 0, n = PyBytes_GET_SIZE(tag)
        while pos < n:
            node = self._descend_or_split(node, tag, pos)
            pos += PyBytes_GET_SIZE(node.label)
            path.append(node)
        if not node.insert(seq):
            return 0
        for node in path:
            node.total += 1
        self._len += 1
        self._ntags += node.size() == 1
        return 0

    def add(self, bytes tag not None, uint64_t seq):
        self._add(tag, seq)

    def add_batch(self, tags, first_seq):
        """add(tags[i], first_seq + i) for every non-None tag."""
        for i, tag in enumerate(tags):
            if tag is not None:
                if not PyBytes_Check(tag):
                    raise TypeError("tag must be bytes")
                self._add(tag, first_seq + i)

    cdef int _removed(self, list path, Py_ssize_t n) except -1:
        """Account for n entries taken from path[-1] and prune emptied nodes."""
        cdef _TNode node
        cdef Py_ssize_t d
        for node in path:
            node.total -= n
        self._len -= n
        node = _last(path)
        self._ntags -= node.size() == 0
        node.compact()
        for d in range(len(path) - 1, 0, -1):  # paths hold only _TNode
            if not _tidy(<_TNode>path[d - 1], <_TNode>path[d]):
                break
        return 0

    cdef bint _discard(self, const unsigned char* tag, Py_ssize_t n, uint64_t seq) except -1:
        cdef list path = self._path(tag, n, False)
        if path is None or not _last(path).remove(seq):
            return False
        self._removed(path, 1)
        return True

    def discard(self, bytes tag not None, uint64_t seq):
        """Remove one entry; cheap when seq is the tag's smallest. Returns whether it existed."""
        return self._discard(<const unsigned char*>PyBytes_AS_STRING(tag), PyBytes_GET_SIZE(tag), seq)

    def pop_exact(self, bytes tag not None, below):
        """Remove and return (ascending) every seq < below stored under exactly ``tag``."""
        cdef uint64_t bound
        cdef bint everything = _below(below, &bound)
        cdef list path = self._path(<const unsigned char*>PyBytes_AS_STRING(tag), PyBytes_GET_SIZE(tag), False)
        cdef list taken
        if path is None or not _last(path).size():
            return []
        taken = _last(path).take_below(bound, everything)
        if taken:
            self._removed(path, len(taken))
        return taken

    def pop_prefix(self, bytes prefix not None, below):
        """Remove and return (ascending) every seq < below whose tag starts with ``prefix``."""
        cdef uint64_t bound
        cdef bint everything = _below(below, &bound)
        cdef list path = self._path(<const unsigned char*>PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix), True)
        cdef list order, runs = []
        cdef _TNode node, parent, child
        cdef Py_ssize_t k, taken_count = 0, d
        if path is None:
            return []
        # (node, parent) pairs; the <_TNode> casts below read back what we put here.
        order = [(_last(path), None)]
        k = 0
        while k < len(order):  # pre-order; the list grows while we walk it
            node = <_TNode>order[k][0]
            for child in node.children.values():
                order.append((child, node))
            k += 1
        for k in range(len(order) - 1, -1, -1):  # children before their parents
            node = <_TNode>order[k][0]
            if node.size():
                runs.append(node.take_below(bound, everything))
                self._ntags -= node.size() == 0
            node.total = node.size()
            for child in node.children.values():
                node.total += child.total
            if order[k][1] is not None:
                _tidy(<_TNode>order[k][1], node)
        taken = [seq for run in runs for seq in run]
        taken.sort()
        if taken:
            for k in range(len(path) - 1):  # paths hold only _TNode
                (<_TNode>path[k]).total -= len(taken)
            self._len -= len(taken)
            for d in range(len(path) - 1, 0, -1):
                if not _tidy(<_TNode>path[d - 1], <_TNode>path[d]):
                    break
        return taken

    def count_exact(self, bytes tag not None):
        cdef list path = self._path(<const unsigned char*>PyBytes_AS_STRING(tag), PyBytes_GET_SIZE(tag), False)
        return _last(path).size() if path is not None else 0

    def count_prefix(self, bytes prefix not None):
        cdef list path = self._path(<const unsigned char*>PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix), True)
        return _last(path).total if path is not None else 0
