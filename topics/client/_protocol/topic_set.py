"""The topic set's calls (contract §1): create or configure, state, listing, delete."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from topics.config import TopicConfig
from topics.types import DeleteTopicResult, PutTopicResult, TopicPage, TopicState, TopicSummary

from .call import Call, Reply, dumps, fields_of, topic_path

__all__ = ["delete_topic", "get_topic", "list_topics", "put_topic", "topic_config", "topic_state"]


def topic_config(obj: Mapping[str, Any]) -> TopicConfig:
    return TopicConfig(**fields_of(TopicConfig, obj))


def put_topic(topic: str, config: Mapping[str, Any] | None) -> Call[PutTopicResult]:
    def parse(reply: Reply) -> PutTopicResult:
        obj = reply.json()
        return PutTopicResult(obj["topic"], bool(obj["created"]), topic_config(obj["config"]))

    body = dumps(dict(config), "config") if config is not None else None
    return Call("PUT", topic_path(topic), parse, body=body)


def topic_state(obj: Mapping[str, Any]) -> TopicState:
    queue = obj.get("queue")
    return TopicState(
        topic=obj["topic"],
        type=obj.get("type", "log"),
        head_seq=obj["head_seq"],
        earliest_seq=obj["earliest_seq"],
        next_seq=obj.get("next_seq", obj["head_seq"] + 1),
        count=obj["count"],
        bytes=obj["bytes"],
        config=topic_config(obj.get("config") or {}),
        effective_priority=obj.get("effective_priority", 0),
        last_write_ts=obj.get("last_write_ts"),
        last_read_ts=obj.get("last_read_ts"),
        queue=dict(queue) if isinstance(queue, dict) else None,
    )


def get_topic(topic: str, touch: bool) -> Call[TopicState]:
    params = None if touch else {"touch": "false"}
    return Call("GET", topic_path(topic), lambda r: topic_state(r.json()), params=params)


def _summary(obj: Mapping[str, Any]) -> TopicSummary:
    durable = bool(obj.get("durable", False))
    return TopicSummary(
        topic=obj["topic"],
        type=obj.get("type", "log"),
        head_seq=obj["head_seq"],
        earliest_seq=obj["earliest_seq"],
        count=obj["count"],
        bytes=obj["bytes"],
        durable=durable,
        durability=obj.get("durability", "fsync" if durable else "disk"),
        effective_priority=obj.get("effective_priority", 0),
    )


def list_topics(
    prefix: str | None, page_size: int, cursor: str | None, touch: bool
) -> Call[TopicPage]:
    params = {"page_size": str(page_size)}
    if prefix:
        params["prefix"] = prefix
    if cursor:
        params["cursor"] = cursor
    if touch:
        params["touch"] = "true"

    def parse(reply: Reply) -> TopicPage:
        obj = reply.json()
        return TopicPage([_summary(t) for t in obj["topics"]], obj.get("next_cursor"))

    return Call("GET", "/v0/topics", parse, params=params)


def delete_topic(topic: str, if_empty: bool) -> Call[DeleteTopicResult]:
    def parse(reply: Reply) -> DeleteTopicResult:
        obj = reply.json()
        return DeleteTopicResult(
            obj["topic"], bool(obj["deleted"]), list(obj.get("routers_removed", []))
        )

    params = {"if_empty": "true"} if if_empty else None
    return Call("DELETE", topic_path(topic), parse, params=params)
