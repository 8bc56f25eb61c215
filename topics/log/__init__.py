"""One topic's log: records, floors, gap markers, reads, producers' state, the registry of logs and byte quotas."""
