"""Storage primitives: the Fs seam, the write-ahead log, the checkpoint manifest and
segment files. They know bytes, files and entries, never topic logs: this package imports
nothing above ``_core`` (the layer list in docs/ARCHITECTURE.md). The engine's persistence
layer (``topics/_persistence``: recovery and checkpoints) and ``topics.Reader`` are built on
these; formats are described in ``docs/STORAGE_FORMATS.md``.
"""
