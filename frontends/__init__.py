"""Frontends of topics (installed as ``topics.frontends``): HTTP, WebSocket, in-process.

Each is thin: parse, call one Engine method, encode the answer.
"""
