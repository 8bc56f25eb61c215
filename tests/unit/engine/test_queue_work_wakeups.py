"""Targeted wake-ups of /work sessions at their in-flight bound: such a session waits for
one of its own node's leases to end, not for appends or other workers' acks, and still
notices every way its leases can end."""

from __future__ import annotations

import trio
import trio.testing

from topics.engine import Engine

LEASE = 1000


async def _queue(engine: Engine, n: int) -> None:
    await engine.put_topic("q", {"type": "queue", "lease_ms": LEASE})
    await engine.write("q", [{"data": i} for i in range(1, n + 1)])


async def test_full_sessions_wake_only_for_their_own_node(engine: Engine) -> None:
    await _queue(engine, 10)
    got: dict[str, list[tuple[int, ...]]] = {"a": [], "b": []}
    async with (
        engine.open_work_session("q", node="a", max=2) as a,
        engine.open_work_session("q", node="b", max=2) as b,
        trio.open_nursery() as nursery,
    ):

        async def pump(name: str, session: object) -> None:
            while True:
                got[name].append((await session.next_jobs()).seqs)  # type: ignore[attr-defined]

        nursery.start_soon(pump, "a", a)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(pump, "b", b)
        await trio.testing.wait_all_tasks_blocked()
        assert got == {"a": [(1, 2)], "b": [(3, 4)]}
        q = engine._queues.states[engine._registry.get("q").topic_id]  # type: ignore[union-attr]
        assert set(q.full) == {"a", "b"}  # both parked at their bound, apart from claimers
        await engine.write("q", [{"data": 11}])
        await engine.ack("q", node="a", seqs=[1])
        await trio.testing.wait_all_tasks_blocked()
        assert got == {"a": [(1, 2), (5,)], "b": [(3, 4)]}
        await engine.nack("q", node="b", seqs=[3], delay_ms=0)
        await trio.testing.wait_all_tasks_blocked()
        assert got["b"] == [(3, 4), (3,)]
        nursery.cancel_scope.cancel()


async def test_a_full_session_notices_its_job_deleted_from_outside(engine: Engine) -> None:
    await _queue(engine, 3)
    got: list[tuple[int, ...]] = []
    async with (
        engine.open_work_session("q", node="w", max=1) as session,
        trio.open_nursery() as nursery,
    ):

        async def pump() -> None:
            while True:
                got.append((await session.next_jobs()).seqs)

        nursery.start_soon(pump)
        await trio.testing.wait_all_tasks_blocked()
        assert got == [(1,)]
        await engine.delete_records("q", before_seq=2)  # the held job goes, lease and all
        await engine.claim("q", node="other")  # any later queue call applies the delete
        await trio.testing.wait_all_tasks_blocked()
        assert got == [(1,), (3,)]
        nursery.cancel_scope.cancel()


async def test_a_full_session_wakes_when_its_lease_expires(engine: Engine, clock) -> None:  # type: ignore[no-untyped-def]
    await _queue(engine, 2)
    got: list[tuple[int, int]] = []
    async with (
        engine.open_work_session("q", node="w", max=1) as session,
        trio.open_nursery() as nursery,
    ):

        async def pump() -> None:
            while True:
                res = await session.next_jobs()
                got.append((res.seqs[0], res.claimed[0].deliveries))

        nursery.start_soon(pump)
        await trio.testing.wait_all_tasks_blocked()
        assert got == [(1, 1)]
        clock.advance(LEASE + 1)
        await engine.get_topic("q", touch=False)  # a queue read applies the expiry
        await trio.testing.wait_all_tasks_blocked()
        assert got == [(1, 1), (1, 2)]  # the reclaimed job jumps the queue (§10.3)
        nursery.cancel_scope.cancel()


# -- task-less sessions (WorkSession.poll, the /work stream's direct delivery) ------------------


class Listening:
    """A session driven the way the /work stream's direct path drives it: ``poll`` now, and
    again whenever the engine tells its listener (``ChangeListener.changed``, this object);
    what each poll leased is recorded."""

    def __init__(self, session: object) -> None:
        self.session = session
        self.got: list[tuple[int, ...]] = []
        self.calls = 0
        self.gave_up = False

    def poll(self) -> None:
        res = self.session.poll(self)  # type: ignore[attr-defined]
        if res is None:
            self.gave_up = True
        elif res.count:
            self.got.append(res.seqs)

    def changed(self) -> bool:
        self.calls += 1
        self.poll()
        return not self.gave_up


async def test_a_listening_session_refills_inside_its_own_nodes_ack(engine: Engine) -> None:
    await _queue(engine, 7)
    async with (
        engine.open_work_session("q", node="a", max=2) as sa,
        engine.open_work_session("q", node="b", max=2) as sb,
    ):
        a, b = Listening(sa), Listening(sb)
        a.poll()
        b.poll()
        assert (a.got, b.got) == ([(1, 2)], [(3, 4)])
        res = await engine.ack("q", node="a", seqs=[1, 2])
        # refilled synchronously, after the ack's counts were taken
        assert (res.ready, res.in_flight) == (3, 2)
        assert (a.got, b.got, b.calls) == ([(1, 2), (5, 6)], [(3, 4)], 0)
        await engine.nack("q", node="b", seqs=[3], delay_ms=0)
        assert b.got == [(3, 4), (3,)]
        assert sb.in_flight == 2


async def test_a_listening_session_below_its_bound_gets_appends(engine: Engine) -> None:
    await _queue(engine, 1)
    async with engine.open_work_session("q", node="w", max=4) as session:
        w = Listening(session)
        w.poll()
        assert w.got == [(1,)]
        await engine.write("q", [{"data": 2}, {"data": 3}])
        await trio.testing.wait_all_tasks_blocked()  # the append relay tells the listener
        assert w.got == [(1,), (2, 3)]


async def test_a_listening_session_hands_over_when_the_topic_goes(engine: Engine) -> None:
    await _queue(engine, 1)
    async with engine.open_work_session("q", node="w", max=1) as session:
        w = Listening(session)
        w.poll()
        await engine.delete_topic("q")
        assert w.gave_up  # the listener was told and the session needs next_jobs now
        q_states = engine._queues.states
        assert all(not q.listeners for q in q_states.values())


async def test_a_listener_is_told_once_per_poll_and_not_after_detach(engine: Engine) -> None:
    await _queue(engine, 1)
    async with engine.open_work_session("q", node="w", max=4) as session:
        told: list[int] = []

        class Once:
            """Polls only when asked to: a told listener that does not poll again is left
            alone by later changes (the queue takes it off before telling it)."""

            def changed(self) -> bool:
                told.append(1)
                return True

        assert session.poll(Once()) is not None
        await engine.write("q", [{"data": 2}])
        await trio.testing.wait_all_tasks_blocked()
        await engine.write("q", [{"data": 3}])
        await trio.testing.wait_all_tasks_blocked()
        assert told == [1]
        assert session.poll(Once()) is not None
        session.detach()
        await engine.write("q", [{"data": 4}])
        await trio.testing.wait_all_tasks_blocked()
        assert told == [1]


async def test_a_closed_session_leaves_no_listener_and_releases(engine: Engine) -> None:
    await _queue(engine, 2)
    async with engine.open_work_session("q", node="w", max=1) as session:
        w = Listening(session)
        w.poll()
        q = engine._queues.states[engine._registry.get("q").topic_id]  # type: ignore[union-attr]
        assert session in q.listeners
    assert not q.listeners
    assert (await engine.get_topic("q")).to_dict()["queue"]["in_flight"] == 0


async def test_a_coalescing_queue_is_left_to_next_jobs(engine: Engine) -> None:
    await engine.put_topic("q", {"type": "queue", "claim_jitter_ms": 2})
    await engine.write("q", [{"data": 1}])
    async with engine.open_work_session("q", node="w", max=1) as session:
        assert session.poll(Listening(session)) is None
