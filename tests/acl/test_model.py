"""ACL tokens, names and the document ACL fingerprint (acl/model.py)."""

from __future__ import annotations

import pytest

from freshindex.acl.model import (
    AclError,
    DocumentAcl,
    Sensitivity,
    is_sensitive,
    is_sidecar,
    normalise_acl,
    sensitivity,
    user_token,
    validate_group,
)


def test_tokens_are_sorted_deduplicated_and_users_are_prefixed() -> None:
    assert normalise_acl(["hr", "eng", "hr"], ["ana", "ana"]) == ("eng", "hr", "user:ana")
    assert user_token("bob@corp.example") == "user:bob@corp.example"
    assert normalise_acl() == ()


@pytest.mark.parametrize("bad", ["", "user:ana", "a b", "-x", "x" * 129, "grp\n", "a/b", "ünï", "a,b"])
def test_a_group_can_never_contain_a_colon_or_pass_for_a_user(bad: str) -> None:
    with pytest.raises(AclError):
        validate_group(bad)
    with pytest.raises(AclError):
        normalise_acl([], [bad])


def test_valid_names() -> None:
    for name in ("public", "hr", "team.eng-1", "a@b", "X" * 128):
        assert validate_group(name) == name


def test_the_fingerprint_depends_on_tokens_tenant_and_sensitivity_only() -> None:
    a = DocumentAcl(("eng", "hr"), "t1", "internal", "source")
    assert a.fingerprint() == DocumentAcl(("hr", "eng"), "t1", "internal", "sidecar").fingerprint()
    assert a.fingerprint() != DocumentAcl(("eng",), "t1", "internal").fingerprint()
    assert a.fingerprint() != DocumentAcl(("eng", "hr"), "t2", "internal").fingerprint()
    assert a.fingerprint() != DocumentAcl(("eng", "hr"), "t1", "restricted").fingerprint()
    assert len(a.fingerprint()) == 64
    assert DocumentAcl(()).fingerprint() != DocumentAcl(("public",)).fingerprint()  # deny-all is its own ACL


def test_sensitivity_values_and_which_are_rechecked() -> None:
    assert sensitivity(None) is Sensitivity.INTERNAL
    assert sensitivity("Confidential") is Sensitivity.CONFIDENTIAL
    with pytest.raises(AclError, match="unknown sensitivity"):
        sensitivity("secret")
    assert [s.value for s in Sensitivity if s.sensitive] == ["confidential", "restricted"]
    assert is_sensitive("restricted") and not is_sensitive("public") and is_sensitive("garbage")


def test_sidecar_names() -> None:
    assert is_sidecar(".freshindex-acl.json") and is_sidecar("a/b/.freshindex-acl.json")
    assert is_sidecar("a/doc.md.acl.json")
    assert not is_sidecar("a/doc.md") and not is_sidecar("a/.acl.json") and not is_sidecar("acl.json")
