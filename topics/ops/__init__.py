"""The engine's own record and topic operations: writes, reads, topic admin, durability, producers."""
