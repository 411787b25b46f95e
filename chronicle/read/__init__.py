"""Reading back what was saved: ``find_traces()`` and ``show()`` over the control plane's HTTP
API (``traces.py``), and the call tree drawn as text at a width (``waterfall.py``).

Nothing here writes: this layer sits above ``save`` (its client) and beside ``replay``, and the
CLI and the facade are its only callers.
"""
