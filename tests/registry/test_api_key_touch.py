"""API keys keep verifying past the ``last_used_at`` touch interval, on SQLite and on PostgreSQL.

SQLite hands datetimes back without a zone; the touch compares the stored
time with an aware "now". Before the registry's datetime column type made
every read aware, the second verification after the interval raised
``TypeError`` on SQLite only, and every key answered 500 a minute after its
first use.
"""

from __future__ import annotations

import datetime as dt

from freshindex.registry.keys import TOUCH_INTERVAL
from freshindex.registry.schema import ApiKey, utcnow


def _last_used(registry, key_id: str) -> dt.datetime | None:
    return next(k for k in registry.list_api_keys() if k.key_id == key_id).last_used_at


def test_a_key_verifies_again_after_the_touch_interval_and_the_touch_is_written(registry) -> None:
    # Given a key used once
    new = registry.create_api_key("ana", ["eng"])
    t0 = utcnow()
    registry.verify_api_key(new.key, now=t0)
    first = _last_used(registry, new.info.key_id)
    assert first is not None and first.tzinfo is not None

    # When it is used again within the interval, and then past it
    registry.verify_api_key(new.key, now=t0 + TOUCH_INTERVAL / 2)
    within = _last_used(registry, new.info.key_id)
    later = t0 + TOUCH_INTERVAL + dt.timedelta(seconds=2)
    info = registry.verify_api_key(new.key, now=later)
    after = _last_used(registry, new.info.key_id)

    # Then both verifications succeed; the touch is written once per interval, not on every use
    assert info.principal == "ana"
    assert within == first
    assert after == later


def test_every_datetime_the_registry_reads_back_is_aware(registry) -> None:
    # Given a row written with an aware time
    new = registry.create_api_key("bo")
    # When it is read back through the ORM directly (not through a record helper)
    with registry.session() as s:
        row = s.get(ApiKey, new.info.key_id)
        created = row.created_at
    # Then the column type has made it aware, whatever the dialect
    assert created.tzinfo is not None
    assert abs(created - utcnow()) < dt.timedelta(minutes=5)
