"""The access decision after the vector query: one verdict per hit, in a fixed order, denials audited."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from freshindex.acl import Principal, query_filter, visible
from freshindex.acl.access import CachedRecheck, PointAcl, Verdict, decide, denial_records


@dataclass(frozen=True)
class Status:
    tombstoned: bool = False
    document_id: str = "d1"
    source_id: str = "s1"
    acl: tuple[str, ...] = ("public",)
    tenant: str = "default"
    sensitivity: str = "internal"
    acl_version: int = 1


ANON = Principal.of()
HANA = Principal.of("hana", ["hr"])


def test_the_order_orphan_then_tombstone_then_tenant_then_acl() -> None:
    payload = {"acl": ["public"], "tenant": "default", "acl_version": 1}
    assert decide(ANON, PointAcl.of(payload), None) is Verdict.ORPHAN
    assert decide(ANON, PointAcl.of(payload), Status(tombstoned=True, tenant="acme")) is Verdict.TOMBSTONED
    assert decide(ANON, PointAcl.of(payload), Status(tenant="acme")) is Verdict.TENANT
    assert decide(ANON, PointAcl.of(payload), Status()) is Verdict.SERVABLE


def test_a_point_written_under_an_older_acl_is_decided_by_the_registry() -> None:
    # The point still says public (acl_version 1); the registry narrowed the document to hr (version 2).
    stale_point = {"acl": ["public"], "tenant": "default", "acl_version": 1}
    narrowed = Status(acl=("hr",), acl_version=2)
    assert decide(ANON, PointAcl.of(stale_point), narrowed) is Verdict.ACL_VERSION
    assert decide(HANA, PointAcl.of(stale_point), narrowed) is Verdict.SERVABLE
    # The same registry row against a point already re-tagged: a plain ACL denial.
    assert decide(ANON, PointAcl.of({"acl": ["hr"], "tenant": "default", "acl_version": 2}), narrowed) is Verdict.ACL
    # A rollback's point from long ago cannot bring the old ACL back either.
    assert decide(ANON, PointAcl.of({"acl": ["public"], "tenant": "default"}), narrowed) is Verdict.ACL_VERSION


def test_user_tokens_and_groups_never_mix() -> None:
    row, point = Status(acl=("user:hana",)), {"acl": ["user:hana"], "tenant": "default", "acl_version": 1}
    assert decide(HANA, PointAcl.of(point), row) is Verdict.SERVABLE
    assert decide(Principal.of("bob", ["hr"]), PointAcl.of(point), row) is Verdict.ACL
    # A group spelled like a user token is not a group at all: it cannot claim a user's documents.
    assert "user:hana" not in Principal.of("bob", ["user:hana"]).readable
    assert "user:anonymous" not in ANON.readable


class Service:
    def __init__(self, answer: bool | None) -> None:
        self.answer, self.calls = answer, 0

    def allows(self, principal: Principal, *, source_id: str, key: str, document_id: str) -> bool | None:
        self.calls += 1
        return self.answer


@pytest.mark.parametrize(("answer", "verdict"), [(True, Verdict.SERVABLE), (False, Verdict.RECHECK),
                                                 (None, Verdict.RECHECK_UNAVAILABLE)])
def test_a_sensitive_document_is_rechecked_and_fails_closed(answer: bool | None, verdict: Verdict) -> None:
    row = Status(acl=("hr",), sensitivity="confidential")
    assert decide(HANA, PointAcl(key="pay.md"), row, Service(answer)) is verdict
    # An internal document is not rechecked: the registry row is the ACL source's answer.
    service = Service(False)
    assert decide(HANA, PointAcl(), Status(acl=("hr",)), service) is Verdict.SERVABLE and service.calls == 0


def test_which_levels_are_rechecked_is_the_model_s_rule() -> None:
    # acl.model.is_sensitive decides: restricted and a level it does not know are rechecked, public is not.
    for level, calls in (("restricted", 1), ("no-such-level", 1), ("public", 0)):
        service = Service(False)
        expected = Verdict.RECHECK if calls else Verdict.SERVABLE
        assert decide(HANA, PointAcl(), Status(acl=("hr",), sensitivity=level), service) is expected
        assert service.calls == calls


def test_the_recheck_cache_is_keyed_by_the_whole_scope_and_keeps_no_unknowns() -> None:
    inner = Service(True)
    cached = CachedRecheck(inner, ttl_s=60)
    ask = dict(source_id="s1", key="pay.md", document_id="d1")
    assert cached.allows(HANA, **ask) and cached.allows(HANA, **ask)
    assert inner.calls == 1
    # Narrowed to fewer groups: a different scope, asked again.
    assert cached.allows(Principal.of("hana", []), **ask) and inner.calls == 2
    inner.answer = None
    assert cached.allows(Principal.of("hana", ["eng"]), **ask) is None
    assert cached.allows(Principal.of("hana", ["eng"]), **ask) is None and inner.calls == 4


def test_filter_and_recheck_agree_on_tenants() -> None:
    flt = query_filter(Principal.of("hana", ["hr"], tenant="acme"))
    point_acme: dict[str, Any] = {"acl": ["hr"], "tenant": "acme"}
    point_default: dict[str, Any] = {"acl": ["hr"], "tenant": "default"}
    assert flt.matches(point_acme) and not flt.matches(point_default)
    acme = Principal.of("hana", ["hr"], tenant="acme")
    assert visible(acme, point_acme) and not visible(acme, point_default)
    # A point written without a tenant matches no one (the filter and the recheck alike).
    assert not query_filter(ANON).matches({"acl": ["public"]}) and not visible(ANON, {"acl": ["public"]})


def test_denial_records_carry_principal_document_reason_and_version() -> None:
    [rec] = denial_records("default", HANA, [("c1", Verdict.ACL_VERSION, Status(acl_version=7))])
    assert rec.as_dict() == {"kb": "default", "principal": "hana", "tenant": "default", "document_id": "d1",
                             "chunk_id": "c1", "reason": "acl_version", "policy_version": 7, "detail": ""}
    assert {str(v) for v in Verdict if v.denial} == {"acl_version", "acl", "tenant", "recheck",
                                                      "recheck_unavailable"}


def test_a_point_s_acl_fields_are_read_from_its_payload_once() -> None:
    # A payload written before ACL versions (or with a broken one) is version 0: older than any registry row.
    assert PointAcl.of({"acl_version": "3", "key": "a.md"}) == PointAcl(acl_version=3, key="a.md")
    assert PointAcl.of({"acl_version": "three", "key": None}) == PointAcl(acl_version=0, key="")
    assert decide(ANON, PointAcl.of({"acl_version": "three"}), Status(acl=("hr",), acl_version=1)) is Verdict.ACL_VERSION
