"""What joins storage to topic logs: the WAL-logging and checkpointing ``Store`` and the
``recover`` that rebuilds a ``TopicRegistry`` from a data directory. It sits above the
logs layer (it stores ``TopicLog``s) and below the engine's subsystems; the file formats
and low-level pieces it uses are in ``topics/_storage``.
"""
