"""The composite watch cursor (topics.wire.cursor): encode/decode and checkpoints."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topics.errors import InvalidRequestError
from topics.wire import cursor


def test_encode_is_unpadded_base64url_of_compact_json() -> None:
    assert cursor.encode({"orders": 5210}) == "eyJvcmRlcnMiOjUyMTB9"
    token = cursor.encode({"notifications": 83000})
    assert "=" not in token
    assert base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)) == b'{"notifications":83000}'


def test_decode_reads_the_contract_examples() -> None:
    assert cursor.decode("eyJvcmRlcnMiOjQwOTh9") == {"orders": 4098}
    assert cursor.decode("eyJvcmRlcnMiOjUyMTAsIm5vdGlmaWNhdGlvbnMiOjg4MTMwfQ") == {
        "orders": 5210,
        "notifications": 88130,
    }


def test_decode_accepts_padding() -> None:
    assert cursor.decode("eyJhIjoxfQ==") == {"a": 1}


@pytest.mark.parametrize(
    "token",
    [
        "",
        "!!!",
        "bm90IGpzb24",  # "not json"
        cursor.encode({"a": -1}),
        cursor.encode({"a": True}),
        cursor.encode({"a": "1"}),  # type: ignore[dict-item]
        base64.urlsafe_b64encode(b"[1,2]").decode(),
        "ck.12",
        "x" * (cursor.MAX_TOKEN_CHARS + 1),
    ],
)
def test_decode_rejects_anything_encode_cannot_produce(token: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        cursor.decode(token)
    assert info.value.code == "invalid_request"


def test_checkpoint_tokens_round_trip_and_never_look_like_maps() -> None:
    token = cursor.encode_checkpoint(42)
    assert token == "ck.42"
    assert cursor.is_checkpoint(token)
    assert cursor.decode_checkpoint(token) == 42
    assert not cursor.is_checkpoint(cursor.encode({"ck": 1}))
    with pytest.raises(InvalidRequestError):
        cursor.decode_checkpoint("ck.x")


@settings(max_examples=40, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,20}", fullmatch=True),
        st.integers(min_value=0, max_value=(1 << 64) - 1),
        max_size=70,
    )
)
def test_round_trip(cursors: dict[str, int]) -> None:
    assert cursor.decode(cursor.encode(cursors)) == cursors
