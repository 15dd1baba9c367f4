"""Where application developers and operators already are: LangChain, LlamaIndex, MCP.

Each integration is a thin layer over the HTTP client
(:mod:`freshindex.injection.http`, :mod:`freshindex.injection.async_http`):
it asks a running ``freshindex serve`` and turns the context packet into the
framework's own types, nothing more. None imports the service (registry,
vector store, workers, API); each needs only its framework, installed by its
extra (``freshindex[langchain]``, ``freshindex[llamaindex]``,
``freshindex[mcp]``). Importing this package imports no framework.

A packet that refuses (*insufficient evidence*) is passed through as an empty
result that carries the reason (:class:`~integrations.common.Retrieved`), or
raised as :class:`~integrations.common.InsufficientEvidence` when asked;
never as made-up documents.
"""
