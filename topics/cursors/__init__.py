"""Named cursors: their store and the engine's cursor operations."""
