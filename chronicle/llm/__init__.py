"""Model calls: per-provider adapters that derive the canonical ``llm`` fields; client wrapping."""
