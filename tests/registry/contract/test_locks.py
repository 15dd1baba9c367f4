"""Contract of :class:`registry.protocols.Locks` (SQLite and PostgreSQL).

Expiry is exercised with a lease already in the past (negative ttl), so no
test waits on the clock.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from freshindex.registry.protocols import Locks


def test_an_unexpired_lease_has_one_owner(reg: Locks, fresh) -> None:
    name = fresh("build")
    token = reg.acquire_lock(name, "a", ttl=60)
    assert token is not None
    assert reg.acquire_lock(name, "b", ttl=60) is None
    assert reg.lock_holder(name)[0] == "a"
    assert reg.lock_holder(name)[2] == token


def test_concurrent_acquirers_get_exactly_one_lease(reg: Locks, fresh) -> None:
    name = fresh("build")
    with ThreadPoolExecutor(4) as pool:
        tokens = list(pool.map(lambda i: reg.acquire_lock(name, f"owner-{i}", 60), range(8)))
    assert sum(t is not None for t in tokens) == 1


def test_every_acquisition_returns_a_larger_fencing_token(reg: Locks, fresh) -> None:
    name = fresh("build")
    first = reg.acquire_lock(name, "a", ttl=60)
    assert first is not None
    reg.release_lock(name, first)
    second = reg.acquire_lock(name, "b", ttl=60)
    assert second is not None and second > first
    third = reg.acquire_lock(name, "b", ttl=60)  # the holder re-acquiring also moves the token on
    assert third is not None and third > second


def test_an_expired_lease_can_be_taken_over_and_the_old_token_is_dead(reg: Locks, fresh) -> None:
    name = fresh("build")
    old = reg.acquire_lock(name, "a", ttl=-1.0)  # already expired: "a" stopped renewing
    assert old is not None
    new = reg.acquire_lock(name, "b", ttl=60)
    assert new is not None and new > old
    assert reg.renew_lock(name, old, 60) is False
    reg.release_lock(name, old)  # a stale release must not free the new owner's lease
    assert reg.lock_holder(name)[0] == "b"
    assert reg.renew_lock(name, new, 60) is True


def test_a_released_lease_is_free(reg: Locks, fresh) -> None:
    name = fresh("build")
    token = reg.acquire_lock(name, "a", ttl=60)
    assert token is not None
    reg.release_lock(name, token)
    assert reg.lock_holder(name)[0] is None
    assert reg.acquire_lock(name, "b", ttl=60) is not None


def test_an_unknown_lease_has_no_holder(reg: Locks, fresh) -> None:
    assert reg.lock_holder(fresh("never")) == (None, 0.0, 0)
