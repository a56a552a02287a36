"""Group history: a derived event stream of what the shards append, kept apart from the
coordinator log (which is trimmed after snapshots). See docs/analytics.md."""
