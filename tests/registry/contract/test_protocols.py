"""The registry satisfies every narrow protocol its consumers are typed with.

Structural typing is not checked at run time (and no type checker runs in
CI), so this test keeps the protocols and :class:`registry.Registry` from
drifting apart: every protocol method exists on the registry with the same
parameters, in the same order, of the same kind.
"""

from __future__ import annotations

import inspect

import pytest

from freshindex.registry import Registry, protocols


def _methods(proto: type) -> list[str]:
    return [n for n, v in inspect.getmembers(proto, inspect.isfunction) if not n.startswith("_")]


@pytest.mark.parametrize("name", protocols.__all__)
def test_registry_has_every_method_of(name: str) -> None:
    proto = getattr(protocols, name)
    assert _methods(proto), f"{name} declares no methods"
    for method in _methods(proto):
        want = inspect.signature(getattr(proto, method)).parameters
        got = inspect.signature(getattr(Registry, method)).parameters
        assert [(p.name, p.kind) for p in want.values()] == [(p.name, p.kind) for p in got.values()], method
