"""topics as an embedded library: write, read with a cursor, tombstones, tag deletes.

Run: .venv/bin/python examples/embedded.py
"""

from __future__ import annotations

import topics


def main() -> None:
    with topics.open(None) as db:  # memory-only; pass a directory to persist
        db.put_topic("orders", {"cap_records": 5})
        for i in range(8):
            db.write(
                "orders", [{"data": {"order": i, "total": 10 * i}, "tag": f"customer-{i % 3}"}]
            )

        # A reader that fell behind the cap gets an explicit tombstone, then the records.
        page = db.diff("orders", from_seq=0, include_tags=True)
        print("tombstone:", page.tombstone)
        for rec in page.records:
            print(f"  seq={rec.seq} tag={rec.tag} data={rec.data}")

        # Delete every order of customer-1: silent for readers, counted in the state.
        deleted = db.delete_records("orders", match=["tag", "Eq", "customer-1"])
        print("deleted:", deleted.deleted, "count now:", db.get_topic("orders").count)

        # Resume exactly where the last read stopped.
        db.write("orders", [{"data": {"order": 8, "total": 80}}])
        more = db.diff("orders", from_seq=page.next_from_seq)
        print("new since cursor:", [r.data for r in more.records], "caught_up:", more.caught_up)


if __name__ == "__main__":
    main()
