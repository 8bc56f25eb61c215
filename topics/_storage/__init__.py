"""Storage primitives: the Fs seam, the write-ahead log, the checkpoint manifest and
segment files. The engine's persistence layer (recovery, checkpoints, the read-only
Reader) is built on these; formats are described in ``docs/STORAGE_FORMATS.md``.
"""
