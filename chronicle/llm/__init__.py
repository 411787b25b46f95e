"""Model calls: the adapter protocol and one adapter per provider, deriving the canonical ``llm`` fields."""
