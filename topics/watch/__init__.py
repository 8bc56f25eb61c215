"""The watch hub: sessions, feeds, prefix joins, bounds, and the engine's watch operations.

Import order, types included (each module imports only those before it; a lower one
names what it uses of a higher one with a Protocol or a type parameter): index, joins,
topic, guard, feed, session, prefix, hub, bounds, options, ops."""
