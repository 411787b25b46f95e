"""Model calls: the adapter protocol, and one adapter per provider (canonical ``llm`` fields)."""
