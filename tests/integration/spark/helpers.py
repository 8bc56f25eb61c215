"""Small helpers shared by the Spark tests: HTTP writes/reads and Reader loops."""

from __future__ import annotations

import json
from typing import Any

import httpx

import topics


def http_write(
    url: str, topic: str, records: list[dict[str, Any]], **fields: Any
) -> dict[str, Any]:
    resp = httpx.post(f"{url}/v0/topics/{topic}", json={"records": records, **fields}, timeout=30)
    resp.raise_for_status()
    answer: dict[str, Any] = resp.json()
    return answer


def http_put_topic(url: str, topic: str, config: dict[str, Any]) -> None:
    httpx.put(f"{url}/v0/topics/{topic}", json=config, timeout=30).raise_for_status()


def http_records(url: str, topic: str) -> list[dict[str, Any]]:
    """Every record of ``topic`` through the diff route, decoded (tags included)."""
    out: list[dict[str, Any]] = []
    cursor = 0
    while True:
        body = {"from_seq": cursor, "limit": 1000, "include_tags": True}
        page = httpx.post(f"{url}/v0/topics/{topic}/diff", json=body, timeout=30).json()
        out += page["records"]
        cursor = page["next_from_seq"]
        if page["caught_up"]:
            return out


def reader_records(path: str, topic: str, from_seq: int = 0) -> list[topics.Record]:
    """The plain single-process Reader loop the data source must agree with."""
    reader = topics.Reader(path)
    out: list[topics.Record] = []
    cursor = from_seq
    while True:
        page = reader.diff(topic, from_seq=cursor, limit=1000, include_tags=True)
        out += page.records
        cursor = page.next_from_seq
        if page.caught_up:
            return out


def read_seqs(spark: Any, location: tuple[str, str], **options: str) -> list[tuple[str, int]]:
    """Sorted (topic, seq) of a batch read with these options."""
    reader = spark.read.format("topics").option(*location)
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted((r.topic, r.seq) for r in reader.load().select("topic", "seq").collect())


def row_key(row: Any) -> tuple[Any, ...]:
    """(seq, ts in ms, tag, parsed data, parsed meta) of a DataFrame row."""
    meta = json.loads(row.meta) if row.meta is not None else None
    return (row.seq, row.ts_ms, row.tag, json.loads(row.data), meta)


def record_key(rec: topics.Record) -> tuple[Any, ...]:
    return (rec.seq, rec.ts, rec.tag, rec.data, rec.meta)
