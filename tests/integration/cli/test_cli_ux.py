"""The command line as people use it (issue 21): flags after the subcommand, --version,
host:port, tail -n and --wait, ISO times, verbatim data, colour on a real terminal only,
rm of a missing topic, and bad input lines named by number or skipped."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import topics
from topics.cli.args import server_url
from topics.cli.format import iso_ms, use_colour

from .conftest import Run, ServerProcess
from .test_cli import ISO, name, no_ts, ok

ESC = "\x1b["


def test_global_flags_are_accepted_after_the_subcommand(topics_cli: Run) -> None:
    t = name("flags")
    ok(topics_cli("write", t, input="1\n"))
    listing = json.loads(ok(topics_cli("ls", "--prefix", t, "--json")))
    assert [x["topic"] for x in listing["topics"]] == [t]
    assert json.loads(ok(topics_cli("stat", t, "--json")))["head_seq"] == 1
    assert json.loads(ok(topics_cli("router", "ls", "--json", "--source", t))) == {"routers": []}
    # One given before and one after: the later one wins, the earlier one still counts.
    before = json.loads(ok(topics_cli("--json", "stat", t, "--timeout", "5")))
    assert before["topic"] == t


def test_version() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "topics.cli", "--version"], capture_output=True, text=True
    )
    assert proc.returncode == 0
    assert proc.stdout == f"topics {topics.__version__} (topics-engine)\n"


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("localhost:4854", "http://localhost:4854"),
        (":4854", "http://127.0.0.1:4854"),
        ("4854", "http://127.0.0.1:4854"),
        ("db.internal", "http://db.internal"),
        ("https://h:1/", "https://h:1"),
        ("http://127.0.0.1:4000", "http://127.0.0.1:4000"),
    ],
)
def test_url_shorthand(given: str, url: str) -> None:
    assert server_url(given) == url


@pytest.mark.cli_process
def test_host_port_reaches_the_server(topics_cli: Run, cli_server: ServerProcess) -> None:
    port = urlsplit(cli_server.base_url).port
    assert ok(topics_cli("health", "--url", f"127.0.0.1:{port}")).startswith("status")
    assert ok(topics_cli("--url", f":{port}", "health")).startswith("status")
    assert ok(topics_cli("health", env={"TOPICS_URL": f":{port}"})).startswith("status")


def test_times_are_iso_unless_raw_ts(topics_cli: Run) -> None:
    t = name("ts")
    ok(topics_cli("write", t, input="7\n"))
    line = ok(topics_cli("read", t))
    m = re.fullmatch(f"1  ({ISO})  7\n", line)
    assert m is not None, line
    raw = ok(topics_cli("read", t, "--raw-ts"))
    ms = int(raw.split()[1])
    assert m.group(1) == iso_ms(ms)
    stamp = dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
    assert int(stamp.timestamp() * 1000) == ms
    stat = ok(topics_cli("stat", t))
    assert re.search(f"^last_write_ts\\s+{ISO}$", stat, re.M)
    assert re.search(r"^last_write_ts\s+\d+$", ok(topics_cli("stat", t, "--raw-ts")), re.M)
    assert isinstance(json.loads(ok(topics_cli("stat", t, "--json")))["last_write_ts"], int)


def test_data_is_printed_as_the_server_keeps_it(topics_cli: Run) -> None:
    t = name("verbatim")
    text = '{"price":1.50,"big":12345678901234567890123,"e":1E+2,"s":"\\u00e9"}'
    ok(topics_cli("write", t, input=text + "\n"))
    assert no_ts(ok(topics_cli("read", t))) == [f"1  {text}"]
    line = ok(topics_cli("read", t, "--json"))
    assert f'"data":{text}' in line
    assert json.loads(line)["$seq"] == 1
    assert no_ts(ok(topics_cli("tail", t, "--from", "0", "--count", "1"))) == [f"{t}  1  {text}"]
    tailed = ok(topics_cli("tail", t, "--from", "0", "--count", "1", "--json"))
    assert f'"data":{text}' in tailed
    assert json.loads(tailed)["topic"] == t


def test_tail_last_n(topics_cli: Run) -> None:
    t = name("last")
    ok(topics_cli("write", t, input="".join(f"{i}\n" for i in range(1, 11))))
    assert no_ts(ok(topics_cli("tail", t, "-n", "3", "--count", "3"))) == [
        f"{t}  8  8",
        f"{t}  9  9",
        f"{t}  10  10",
    ]
    assert no_ts(ok(topics_cli("tail", t, "--last", "20", "--count", "1"))) == [f"{t}  1  1"]
    bad = topics_cli("tail", t, "-n", "-1")
    assert bad.returncode == 2


def test_rm_of_a_missing_topic_exits_3(topics_cli: Run) -> None:
    proc = topics_cli("rm", name("never"))
    assert proc.returncode == 3
    assert "no such topic" in proc.stderr


@pytest.mark.cli_process
def test_a_bad_data_line_is_named_and_nothing_of_it_is_sent(topics_cli: Run) -> None:
    t = name("badline")
    proc = topics_cli("write", t, input='1\n{"a":\n3\n')
    assert proc.returncode == 2
    assert "line 2: not a JSON value" in proc.stderr
    missing = topics_cli("stat", t)
    assert missing.returncode == 3  # the batch was never sent: the topic was not even created


def test_a_record_the_server_refuses_is_named_by_its_line(topics_cli: Run) -> None:
    t = name("refused")
    lines = '{"data":1}\n\n{"data":2,"tga":"x"}\n{"data":3}\n'
    proc = topics_cli("write", t, "--records", input=lines)
    assert proc.returncode == 2
    assert "line 3: invalid_request: records[1].tga" in proc.stderr
    assert topics_cli("stat", t).returncode == 3  # a write is atomic: nothing stored


def test_skip_bad_leaves_out_bad_lines_and_writes_the_rest(topics_cli: Run) -> None:
    t = name("skip")
    lines = '{"data":1}\n[oops\n{"data":2,"tga":"x"}\n{"data":3,"tag":"ok"}\n{"data":4}\n'
    proc = topics_cli("write", t, "--records", "--skip-bad", "--batch", "2", input=lines)
    out = ok(proc)
    assert out == f"wrote 3 records to {t} (seqs 1..3); skipped 2 bad lines\n"
    assert "skipped line 2: not a record object" in proc.stderr
    assert "skipped line 3: invalid_request: records[" in proc.stderr
    recs = [json.loads(x) for x in ok(topics_cli("read", t, "--json")).splitlines()]
    assert [(r["data"], r.get("$tag")) for r in recs] == [(1, None), (3, "ok"), (4, None)]
    summary = json.loads(ok(topics_cli("write", t, "--skip-bad", "--json", input="5\n{x\n")))
    assert (summary["records"], summary["skipped_lines"]) == (1, 1)


@pytest.mark.slow
def test_tail_wait_follows_a_topic_created_later(cli_server: ServerProcess) -> None:
    t = name("later")
    cmd = [sys.executable, "-m", "topics.cli", "tail", t, "--wait", "--count", "2",
           "--url", cli_server.base_url]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline() == f"topics: waiting for {t} to exist\n"
        with topics.Client(cli_server.base_url) as client:
            client.write(t, [{"data": "first"}, {"data": "second"}])
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert no_ts(out) == [f'{t}  1  "first"', f'{t}  2  "second"']  # from its first record


def _on_a_tty(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run the CLI with stdout and stderr on a pseudo-terminal; what it wrote there."""
    main_fd, sub_fd = os.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "topics.cli", *args], stdout=sub_fd, stderr=sub_fd, env=env
        )
        os.close(sub_fd)
        chunks = []
        while True:
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:  # EIO: the terminal's other side is closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        return proc.wait(timeout=30), b"".join(chunks).decode()
    finally:
        os.close(main_fd)


@pytest.mark.slow
def test_colour_on_a_terminal_only_and_never_with_no_color(cli_server: ServerProcess) -> None:
    t = name("colour")
    with topics.Client(cli_server.base_url) as client:
        client.write(t, [{"data": 1.5, "tag": "x"}])
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["TOPICS_URL"] = cli_server.base_url
    code, shown = _on_a_tty(["read", t], env)
    assert code == 0, shown
    assert f"{ESC}1;36m1{ESC}0m" in shown  # the seq
    assert f"{ESC}33mtag=x{ESC}0m" in shown
    code, plain = _on_a_tty(["read", t], {**env, "NO_COLOR": "1"})
    assert code == 0
    assert ESC not in plain
    assert "tag=x" in plain
    code, never = _on_a_tty(["read", t, "--color", "never"], env)
    assert ESC not in never
    piped = subprocess.run(
        [sys.executable, "-m", "topics.cli", "read", t], capture_output=True, text=True, env=env
    )
    assert ESC not in piped.stdout
    forced = subprocess.run(
        [sys.executable, "-m", "topics.cli", "read", t, "--color", "always"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert ESC in forced.stdout


@pytest.mark.slow
def test_progress_bar_by_default_on_a_terminal_only(
    cli_server: ServerProcess, tmp_path: Path
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(f'{{"i":{i}}}\n' for i in range(500)))
    env = {**os.environ, "TOPICS_URL": cli_server.base_url}
    code, shown = _on_a_tty(["write", name("bar"), str(src)], env)
    assert code == 0, shown
    assert "[##############################] 100%" in shown
    assert "500 records" in shown
    piped = subprocess.run(
        [sys.executable, "-m", "topics.cli", "write", name("bar"), str(src)],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert piped.returncode == 0
    assert "%" not in piped.stderr


def test_use_colour_rules() -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    tty = Tty()
    assert use_colour("auto", tty, {}) is True  # type: ignore[arg-type]
    assert use_colour("auto", tty, {"NO_COLOR": "1"}) is False  # type: ignore[arg-type]
    assert use_colour("auto", tty, {"NO_COLOR": ""}) is True  # type: ignore[arg-type]
    assert use_colour("always", tty, {"NO_COLOR": "1"}) is True  # type: ignore[arg-type]
    assert use_colour("never", tty, {}) is False  # type: ignore[arg-type]
