"""Integrations: propagation across services, HTTP servers and clients, agent frameworks."""
