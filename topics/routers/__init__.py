"""Routers: definitions, the forwarding workers, and the engine's router operations."""
