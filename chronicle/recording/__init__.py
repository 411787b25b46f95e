"""Record: the crossing lifecycle of a boundary, from live call to envelope."""
