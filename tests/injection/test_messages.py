"""Message payloads: three injection forms in the Anthropic Messages and OpenAI chat shapes."""

from __future__ import annotations

import json

import pytest

from freshindex.injection.messages import SYSTEM_TEXT, TOOL_NAME, Form, anthropic_payload, openai_payload, payload
from freshindex.injection.types import ContextPacket, Evidence, render_context

QUESTION = "How do I roll back?"


def _packet() -> ContextPacket:
    ev = (Evidence(n=1, chunk_id="c1", score=0.8, text="Run `alembic downgrade -1`.", title="Release",
                   key="guides/release.md", source_id="docs", heading_path=("Release", "Rollback"), anchor="rollback",
                   page=None, doc_version=2, snapshot_id="kb-v3", written_in="kb-v1"),)
    return ContextPacket(QUESTION, "kb", "kb-v3", ev, False, None, render_context(QUESTION, "kb", "kb-v3", ev))


def _texts(node) -> list[str]:
    """Every string anywhere in a JSON-like value."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [t for v in node.values() for t in _texts(v)]
    if isinstance(node, list):
        return [t for v in node for t in _texts(v)]
    return []


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("form", list(Form))
def test_every_shape_carries_the_block_once_outside_the_system_prompt(provider: str, form: Form) -> None:
    packet = _packet()
    body = payload(packet, provider=provider, form=form, system="You are the ops assistant.")
    json.dumps(body)  # plain JSON
    # The block appears exactly once, whole, and never in a system message
    assert sum(packet.rendered in t for t in _texts(body)) == 1
    system = body["system"] if provider == "anthropic" else body["messages"][0]["content"]
    assert packet.rendered not in system and system.startswith("You are the ops assistant.") and SYSTEM_TEXT in system
    # The question is asked by the user
    users = [m for m in body["messages"] if m["role"] == "user"]
    assert any(QUESTION in t for m in users for t in _texts(m["content"]))
    if provider == "openai":
        assert body["messages"][0]["role"] == "system"
        assert all(m["role"] != "system" for m in body["messages"][1:])


def test_anthropic_user_and_retrieval_forms() -> None:
    packet = _packet()
    user = anthropic_payload(packet, "user")["messages"]
    assert [m["role"] for m in user] == ["user"]
    assert [b["text"] for b in user[0]["content"]] == [packet.rendered, QUESTION]  # context first
    retrieval = anthropic_payload(packet, Form.RETRIEVAL)["messages"]
    assert [m["role"] for m in retrieval] == ["user", "user"]
    assert retrieval[0]["content"] == [{"type": "text", "text": packet.rendered}]


def test_anthropic_tool_form_pairs_the_call_and_its_result() -> None:
    packet = _packet()
    body = anthropic_payload(packet, Form.TOOL)
    assert body["tools"][0]["name"] == TOOL_NAME and body["tools"][0]["input_schema"]["required"] == ["query"]
    ask, call, result = body["messages"]
    assert [ask["role"], call["role"], result["role"]] == ["user", "assistant", "user"]
    use = call["content"][0]
    assert use["type"] == "tool_use" and use["name"] == TOOL_NAME and use["input"] == {"query": QUESTION}
    assert use["id"].startswith("toolu_") and use["id"].replace("_", "").isalnum()
    (res,) = result["content"]
    assert res["type"] == "tool_result" and res["tool_use_id"] == use["id"]
    assert res["content"] == [{"type": "text", "text": packet.rendered}]


def test_openai_forms() -> None:
    packet = _packet()
    user = openai_payload(packet, Form.USER)["messages"]
    assert [m["role"] for m in user] == ["system", "user"] and user[1]["content"] == f"{packet.rendered}\n\n{QUESTION}"
    retrieval = openai_payload(packet, Form.RETRIEVAL)["messages"]
    assert [(m["role"], m.get("name")) for m in retrieval] == [("system", None), ("user", "retrieval"), ("user", None)]
    tool = openai_payload(packet, Form.TOOL)
    _, ask, call, result = tool["messages"]
    assert ask == {"role": "user", "content": QUESTION}
    (tc,) = call["tool_calls"]
    assert call["role"] == "assistant" and tc["type"] == "function" and tc["function"]["name"] == TOOL_NAME
    assert json.loads(tc["function"]["arguments"]) == {"query": QUESTION}
    assert result == {"role": "tool", "tool_call_id": tc["id"], "content": packet.rendered}
    assert tool["tools"][0]["function"]["parameters"]["properties"] == {"query": {"type": "string"}}


def test_payloads_of_a_static_packet_are_byte_stable() -> None:
    ev = _packet().evidence
    a = ContextPacket(QUESTION, "kb", "kb-v3", ev, False, None,
                      render_context(QUESTION, "kb", "kb-v3", ev, deterministic=True, kb_version="kb-v3"))
    b = ContextPacket(QUESTION, "kb", "kb-v3", ev, False, None,
                      render_context(QUESTION, "kb", "kb-v3", ev, deterministic=True, kb_version="kb-v3"))
    for provider in ("anthropic", "openai"):
        for form in Form:
            assert json.dumps(payload(a, provider=provider, form=form)) == json.dumps(payload(b, provider=provider,
                                                                                                form=form))


def test_an_unknown_provider_or_form_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown provider"):
        payload(_packet(), provider="gemini")
    with pytest.raises(ValueError):
        anthropic_payload(_packet(), "system")
