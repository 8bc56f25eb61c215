"""Queues: job state, leases and claims, the job log, /work sessions, and the engine's queue and job operations."""
