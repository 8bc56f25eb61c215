"""``topics cursors ls|lag|reset|rm`` (issue 34): consumer groups' named cursors, as
``kafka-consumer-groups --describe/--reset-offsets/--delete`` does for Kafka, and their lag
in ``stat``."""

from __future__ import annotations

import json
import re

import pytest

import topics

from .conftest import Run, ServerProcess
from .test_cli import ISO, name, ok


def _groups(client: topics.Client, t: str) -> dict[str, int]:
    return {c.cursor: c.seq for c in client.list_cursors(t)}


@pytest.mark.cli_process
def test_cursors_ls_and_lag(topics_cli: Run, cli_server: ServerProcess) -> None:
    t = name("curls")
    with topics.Client(cli_server.base_url) as client:
        client.write(t, [{"data": i} for i in range(10)])
        client.put_cursor(t, "billing", 4)
        client.put_cursor(t, "audit", 10)
    rows = ok(topics_cli("cursors", "ls", t)).splitlines()
    assert rows[0].split() == ["GROUP", "SEQ", "HEAD", "LAG", "UPDATED"]
    assert [r.split()[:4] for r in rows[1:]] == [["audit", "10", "10", "0"],
                                                 ["billing", "4", "10", "6"]]  # fmt: skip
    assert re.fullmatch(ISO, rows[1].split()[4])
    listed = json.loads(ok(topics_cli("--json", "cursors", "ls", t)))
    assert [(c["cursor"], c["lag"]) for c in listed["cursors"]] == [("audit", 0), ("billing", 6)]
    assert ok(topics_cli("cursors", "lag", t, "billing")) == "6\n"  # for scripts
    lags = [line.split() for line in ok(topics_cli("cursors", "lag", t)).splitlines()]
    assert lags == [["audit", "0"], ["billing", "6"]]
    assert json.loads(ok(topics_cli("--json", "cursors", "lag", t, "billing")))["lag"] == 6
    missing = topics_cli("cursors", "lag", t, "nobody")
    assert missing.returncode == 3
    assert "cursor_not_found" in missing.stderr
    nothing = topics_cli("cursors", "ls", name("nosuch"))
    assert nothing.returncode == 3
    assert ok(topics_cli("cursors", "ls", t, "billing")).splitlines()[1].split()[0] == "billing"


@pytest.mark.cli_process
def test_cursors_reset(topics_cli: Run, cli_server: ServerProcess) -> None:
    t = name("curreset")
    with topics.Client(cli_server.base_url) as client:
        client.write(t, [{"data": i} for i in range(10)])
        client.delete_records(t, before_seq=4)  # earliest is now 4
        client.put_cursor(t, "g", 6)

        def reset(*how: str) -> str:
            return ok(topics_cli("cursors", "reset", t, "g", *how))

        assert reset("--to-earliest") == f"g on {t}: 6 -> 3 (lag 7)\n"
        assert reset("--to-latest") == f"g on {t}: 3 -> 10 (lag 0)\n"
        assert reset("--to", "5") == f"g on {t}: 10 -> 5 (lag 5)\n"
        assert reset("--to", "-2") == f"g on {t}: 5 -> 8 (lag 2)\n"  # 2 before the head
        assert reset("--shift-by", "-3") == f"g on {t}: 8 -> 5 (lag 5)\n"
        assert reset("--shift-by", "100") == f"g on {t}: 5 -> 10 (lag 0)\n"  # at most the head
        dry = reset("--to", "1", "--dry-run")
        assert dry == f"g on {t}: 10 -> 1 (lag 9) (dry run: not committed)\n"
        assert _groups(client, t) == {"g": 10}
        as_json = json.loads(ok(topics_cli("--json", "cursors", "reset", t, "g", "--to", "7")))
        assert (as_json["cursor"], as_json["seq"], as_json["lag"]) == ("g", 7, 3)
        # A group never committed is created where it is reset to.
        assert reset("--to", "2").startswith("g on")
        assert ok(topics_cli("cursors", "reset", t, "new", "--to-latest")) == (
            f"new on {t}: - -> 10 (lag 0)\n"
        )
        # Past the head: the server's invalid_request, and nothing moves.
        past = topics_cli("cursors", "reset", t, "g", "--to", "11")
        assert past.returncode == 1
        assert "invalid_request" in past.stderr
        assert _groups(client, t) == {"g": 2, "new": 10}
        none = topics_cli("cursors", "reset", t, "g")
        assert none.returncode == 2  # say where to


def test_cursors_reset_to_a_time(topics_cli: Run, cli_server: ServerProcess) -> None:
    t = name("curtime")
    with topics.Client(cli_server.base_url) as client:
        client.write(t, [{"data": 1}, {"data": 2}])
        first = client.diff(t).records[0]
    # Just before the first record written at or after the time (epoch ms, RFC 3339 or 1h).
    at = ok(topics_cli("cursors", "reset", t, "g", "--to-time", str(first.ts)))
    assert at == f"g on {t}: - -> 0 (lag 2)\n"
    later = ok(topics_cli("cursors", "reset", t, "g", "--to-time", str(first.ts + 60_000)))
    assert later == f"g on {t}: 0 -> 2 (lag 0)\n"  # nothing written since: the head
    bad = topics_cli("cursors", "reset", t, "g", "--to-time", "yesterday")
    assert bad.returncode == 2


@pytest.mark.cli_process
def test_cursors_rm(topics_cli: Run, cli_server: ServerProcess) -> None:
    t = name("currm")
    with topics.Client(cli_server.base_url) as client:
        client.write(t, [{"data": 1}])
        client.put_cursor(t, "g", 1)
        assert ok(topics_cli("cursors", "rm", t, "g")) == f"deleted cursor g of {t}\n"
        assert _groups(client, t) == {}
    again = topics_cli("cursors", "rm", t, "g")  # like rm(1) of a missing file
    assert (again.returncode, again.stdout) == (3, "")
    assert again.stderr == f"topics: {t}: no cursor g (nothing deleted)\n"


def test_stat_shows_each_groups_lag_and_durability_once(
    topics_cli: Run, cli_server: ServerProcess
) -> None:
    t = name("curstat")
    with topics.Client(cli_server.base_url) as client:
        client.write(t, [{"data": i} for i in range(5)])
        client.put_cursor(t, "billing", 2)
    stat = ok(topics_cli("stat", t))
    assert re.search(r"^cursor\.billing\s+seq=2 lag=3$", stat, re.M), stat
    assert re.search(r"^config\.durability\s+disk$", stat, re.M)
    assert "config.durable " not in stat  # one line for one setting
    as_json = json.loads(ok(topics_cli("--json", "stat", t)))
    assert [(c["cursor"], c["lag"]) for c in as_json["cursors"]] == [("billing", 3)]
    assert as_json["config"]["durability"] == "disk"  # the API's shape, untouched
