"""Save: the one place that talks to the network (the control-plane client and delivery)."""
