"""The injection client: question + principal -> safe, cited context block."""

from injection.client import ContextPacket, Evidence, InjectionClient, render_context

__all__ = ["ContextPacket", "Evidence", "InjectionClient", "render_context"]
