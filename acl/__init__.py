"""Who may see what: principals, and the filters that run inside the vector query."""

from freshindex.acl.principal import PUBLIC, Principal, query_filter, visible

__all__ = ["PUBLIC", "Principal", "query_filter", "visible"]
