"""Test doubles and local servers for testing code that uses Chronicle.

``capture()`` is the in-memory double: Chronicle configured to "deliver" to an
``InMemoryControlPlane`` that validates and keeps every entity the way the control plane would
(labels written once, an open envelope replaced by its close, a closed one immutable), so a unit
test can assert on exactly what would have been sent, and replay it, with no server::

    from chronicle.testing import capture

    with capture() as sent:
        run_agent("hello")
    assert [e.name for e in sent.envelopes] == ["planner", "search"]

``LocalControlPlane`` (``chronicle.testing.local``) runs the real control plane in a subprocess
and reads back what Chronicle stored there; it raises ``LocalControlPlaneError`` when the server
cannot be started::

    from chronicle.testing import LocalControlPlane

    with LocalControlPlane() as control_plane:
        chronicle.configure(control_plane_url=control_plane.url)
        ...  # run the code under test, then flush
        envelopes = control_plane.wait_for_envelopes(trace_id, count=2)

Nothing here touches the network beyond ``127.0.0.1`` and nothing is registered globally.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chronicle.lazy import loaded_on_use

__all__ = ["InMemoryControlPlane", "LocalControlPlane", "LocalControlPlaneError", "capture"]

if TYPE_CHECKING:
    from chronicle.errors import LocalControlPlaneError
    from chronicle.testing.local import LocalControlPlane
    from chronicle.testing.memory import InMemoryControlPlane, capture

_FROM = {
    "InMemoryControlPlane": "chronicle.testing.memory",
    "capture": "chronicle.testing.memory",
    "LocalControlPlane": "chronicle.testing.local",
    "LocalControlPlaneError": "chronicle.errors",
}
"""Where each name lives: loaded when first asked for (PEP 562), so that the pytest plugin, which
every pytest session imports from this package, does not load the models, the runtime and the
HTTP client with it."""


__getattr__ = loaded_on_use(__name__, _FROM)
"""A name of ``__all__``, imported from its module the first time it is asked for."""
