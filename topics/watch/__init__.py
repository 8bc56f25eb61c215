"""The watch hub: sessions, feeds, prefix joins, bounds, and the engine's watch operations."""
