"""The OpenTelemetry side: the provider Chronicle records through, its processor and sampler."""
