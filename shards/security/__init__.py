"""Security data kept in the store: SCRAM credentials (and the principals' ACLs), each a
named document (see :meth:`shards.storage.base.LogStore.read_document`) that every process
watches. See docs/security.md."""
