"""Helpers shared by the tests (local servers speaking real wire formats)."""
