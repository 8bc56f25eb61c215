"""Pure wire codecs shared by the frontends: no sockets, no trio, no web framework.

``envelope`` renders the error envelope and the performance object (§0.5, §0.9);
``metrics`` renders ``/v0/metrics`` as Prometheus text or a JSON snapshot (§8.3).
"""
