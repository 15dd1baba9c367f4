"""The registry contract's leases: named locks with fencing tokens, a pending build behind its lock, API keys.

Every interval is crossed on a :class:`registry_base.ManualClock` (the
locks' wall clock) or an injected ``now``, never by sleeping.  Checks, on
whatever backend: at most one owner holds an unexpired lease, however many
race for it; every acquisition returns a larger token; one second before
its TTL a lease is still held and one second after it is taken over, the
old token dead for renew and release; a run whose build is pending is not
stalled while a builder holds the knowledge base's lock, and is once that
lock has expired; an API key's ``last_used_at`` is written once per touch
interval and every time read back is aware; a malformed, wrong or revoked
key is rejected with its reason.

What it does not check: processes whose clocks disagree (expiry is wall
clock by design, :class:`registry.protocols.Locks`), or the builder's use of
the token (:mod:`registry_snapshots`' stale-token test does).
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor

import pytest

from freshindex.core.errors import NotFoundError
from freshindex.registry import Registry
from freshindex.registry import locks as registry_locks
from freshindex.registry import runs as registry_runs
from freshindex.registry.keys import TOUCH_INTERVAL, ApiKeyRejected, split_key
from freshindex.registry.schema import ApiKey, utcnow
from freshindex.testing.registry_base import ManualClock, RegistrySuite, stage


class LocksContract(RegistrySuite):
    """:class:`registry.protocols.Locks`, past each TTL on a clock the test moves."""

    @pytest.fixture
    def clock(self, monkeypatch: pytest.MonkeyPatch) -> ManualClock:
        return ManualClock().install(monkeypatch, registry_locks, registry_runs)

    def test_an_unexpired_lease_has_one_owner_until_its_ttl_has_passed(self, reg: Registry, clock: ManualClock) -> None:
        name = self.fresh("build")
        token = reg.acquire_lock(name, "a", ttl=60)
        assert token is not None
        clock.advance(59)
        assert reg.acquire_lock(name, "b", ttl=60) is None
        assert reg.lock_holder(name)[0::2] == ("a", token)
        clock.advance(2)  # one second past the TTL: "a" stopped renewing
        taken = reg.acquire_lock(name, "b", ttl=60)
        assert taken is not None and taken > token
        assert reg.lock_holder(name)[0] == "b"

    def test_a_renewed_lease_outlives_its_first_ttl(self, reg: Registry, clock: ManualClock) -> None:
        name = self.fresh("build")
        token = reg.acquire_lock(name, "a", ttl=60)
        assert token is not None
        clock.advance(50)
        assert reg.renew_lock(name, token, 60) is True
        clock.advance(50)  # 100 s after acquiring, 50 s after the renewal
        assert reg.acquire_lock(name, "b", ttl=60) is None
        clock.advance(11)
        assert reg.acquire_lock(name, "b", ttl=60) is not None

    def test_an_expired_lease_taken_over_leaves_the_old_token_dead(self, reg: Registry, clock: ManualClock) -> None:
        name = self.fresh("build")
        old = reg.acquire_lock(name, "a", ttl=30)
        assert old is not None
        clock.advance(31)
        new = reg.acquire_lock(name, "b", ttl=60)
        assert new is not None and new > old
        assert reg.renew_lock(name, old, 60) is False
        reg.release_lock(name, old)  # a stale release must not free the new owner's lease
        assert reg.lock_holder(name)[0] == "b"
        assert reg.renew_lock(name, new, 60) is True
        reg.release_lock(name, new)
        assert reg.acquire_lock(name, "c", ttl=5) == new + 1

    def test_concurrent_acquirers_get_exactly_one_lease(self, reg: Registry) -> None:
        name = self.fresh("build")
        with ThreadPoolExecutor(4) as pool:
            tokens = list(pool.map(lambda i: reg.acquire_lock(name, f"owner-{i}", 60), range(8)))
        assert sum(t is not None for t in tokens) == 1

    def test_every_acquisition_returns_a_larger_fencing_token(self, reg: Registry) -> None:
        name = self.fresh("build")
        first = reg.acquire_lock(name, "a", ttl=60)
        assert first is not None
        reg.release_lock(name, first)
        second = reg.acquire_lock(name, "b", ttl=60)
        assert second is not None and second > first
        third = reg.acquire_lock(name, "b", ttl=60)  # the holder re-acquiring also moves the token on
        assert third is not None and third > second

    def test_a_released_lease_is_free_and_an_unknown_one_has_no_holder(self, reg: Registry) -> None:
        name = self.fresh("build")
        token = reg.acquire_lock(name, "a", ttl=60)
        assert token is not None
        reg.release_lock(name, token)
        assert reg.lock_holder(name)[0] is None
        assert reg.acquire_lock(name, "b", ttl=60) is not None
        assert reg.lock_holder(self.fresh("never")) == (None, 0.0, 0)

    def test_a_pending_build_is_not_stalled_while_its_builder_holds_the_lock(self, reg: Registry,
                                                                              clock: ManualClock) -> None:
        # Given a finished run whose build is pending, and a builder holding the kb's lock for 10 minutes
        source = self.source(reg)
        run, cs = reg.start_sync_run(source.id, "test")
        stage(reg, run, cs, source, "a.md", ["text"])
        reg.finish_sync_run(run)
        assert reg.acquire_lock(f"build:{source.kb}", "builder", ttl=600) is not None
        # When the run's lease (60 s) has run out, it is not stalled while the lock is held ...
        clock.advance(120)
        assert run not in {r.id for r in reg.stalled_runs(60, now=clock.utc())}
        # ... and it is once the builder's lock has expired (the builder died)
        clock.advance(600)
        assert run in {r.id for r in reg.stalled_runs(60, now=clock.utc())}


class ApiKeyContract(RegistrySuite):
    """API keys verify past the ``last_used_at`` touch interval; what the registry reads back is aware."""

    def last_used(self, reg: Registry, key_id: str) -> dt.datetime | None:
        return next(k for k in reg.list_api_keys() if k.key_id == key_id).last_used_at

    def test_a_key_verifies_again_after_the_touch_interval_and_the_touch_is_written(self, reg: Registry) -> None:
        # Given a key used once
        new = reg.create_api_key(self.fresh("ana"), ["eng"])
        t0 = utcnow()
        reg.verify_api_key(new.key, now=t0)
        first = self.last_used(reg, new.info.key_id)
        assert first is not None and first.tzinfo is not None
        # When it is used again within the interval, and then past it
        reg.verify_api_key(new.key, now=t0 + TOUCH_INTERVAL / 2)
        within = self.last_used(reg, new.info.key_id)
        later = t0 + TOUCH_INTERVAL + dt.timedelta(seconds=2)
        info = reg.verify_api_key(new.key, now=later)
        # Then both verifications succeed; the touch is written once per interval, not on every use
        assert info.principal == self.fresh("ana")
        assert within == first
        assert self.last_used(reg, new.info.key_id) == later

    def test_every_datetime_the_registry_reads_back_is_aware(self, reg: Registry) -> None:
        new = reg.create_api_key(self.fresh("bo"))
        # Read back through the ORM directly (not through a record helper): the column type made it aware
        with reg.session() as s:
            row = s.get(ApiKey, new.info.key_id)
            assert row is not None
            created = row.created_at
        assert created.tzinfo is not None
        assert abs(created - utcnow()) < dt.timedelta(minutes=5)

    def test_a_revoked_wrong_or_unknown_key_is_rejected_with_its_reason(self, reg: Registry) -> None:
        new = reg.create_api_key(self.fresh("cy"), ["ops"])
        key_id, secret = split_key(new.key) or ("", "")
        for presented, reason in [("not-a-key", "malformed_key"), (new.key.replace(secret, "x" * len(secret)),
                                                                     "wrong_secret")]:
            with pytest.raises(ApiKeyRejected) as exc:
                reg.verify_api_key(presented)
            assert exc.value.reason == reason
        first = reg.revoke_api_key(key_id)
        assert first.revoked and reg.revoke_api_key(key_id).revoked_at == first.revoked_at  # twice keeps the first
        with pytest.raises(ApiKeyRejected) as exc:
            reg.verify_api_key(new.key)
        assert exc.value.reason == "revoked_key"
        assert key_id not in {k.key_id for k in reg.list_api_keys(include_revoked=False)}
        with pytest.raises(NotFoundError):
            reg.revoke_api_key(self.fresh("nokey"))


__all__ = ["ApiKeyContract", "LocksContract"]
