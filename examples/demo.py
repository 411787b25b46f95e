"""``make demo``: from an incident to a proven fix, on a local control plane that stays up.

1. Start the real control plane on port 8800 (another free port if that one is taken, saying
   what holds it), with its SQLite database in Chronicle's data folder, so the traces outlive
   the run (a temporary one when another demo is using that database). ``--control-plane URL``
   records into a control plane you run instead (the Quickstart's, say) and starts none.
2. Record one run of the support agent: the model asks to delete the customer database and the
   ungated tool does it. Print its call tree (what ``chronicle show`` prints) and its pages: the
   control plane's, and Chronicle's trace page (the calls nested, each opening to its input and
   output), served from this process as ``chronicle serve`` serves it.
3. Replay that run with the fixed tool as the only live call (a cut-point): the model's answers
   come from the recording, so the fix is checked with zero model calls and nothing is written.
   The model's second call now reads the fixed tool's result, so its recorded answer is stale:
   the strict replay reports that divergence (declared as expected in the plan), and the fix is
   proven by what the fixed tool did, not by that stale answer.
4. Keep the control plane running, so the page and the ``chronicle`` commands work, until
   Ctrl-C. ``--exit`` or ``CHRONICLE_DEMO_EXIT=1`` ends the demo at once instead (CI, tests).

Options: ``--exit``, ``--port N`` (the port to try first, default 8800), ``--control-plane URL``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import support_agent as agent

import chronicle
from chronicle.cli import control_plane_at, data_dir, port_is_free, stop_on_sigterm
from chronicle.cli.serve import PageServer
from chronicle.read.waterfall import can_draw, use_color
from chronicle.save.client import HttpControlPlane
from chronicle.testing import LocalControlPlane, LocalControlPlaneError
from chronicle.testing.local import DatabaseInUseError, snapshot_of

PORT = 8800
EXIT_AT_ONCE = "CHRONICLE_DEMO_EXIT"

PROFILE = chronicle.AgentProfile(
    "support-agent",
    "Help customers manage their files without losing their data.",
    instructions=["Confirm which files a request covers before acting on them."],
    constraints=["Never delete customer data; only files under /tmp may be deleted."],
    model={"name": "gpt-4o-mini", "temperature": 0},
    metadata={"version": "1.0.0", "team": "support"},
)


def _command() -> str:
    """How to run ``chronicle`` from here: the script next to this interpreter, else the module."""
    script = Path(sys.executable).parent / "chronicle"
    if script.exists():
        try:
            return str(script.relative_to(Path.cwd()))
        except ValueError:
            return str(script)
    return f"{sys.executable} -m chronicle"


class Running:
    """A control plane the demo did not start (``--control-plane URL``)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def snapshot(self) -> dict[str, object]:
        """What the control plane holds (to show the replay writes nothing)."""
        client = HttpControlPlane(self.url, os.environ.get("CHRONICLE_API_KEY"), 10)
        try:
            return snapshot_of(client)
        finally:
            client.close()


def _option(argv: list[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in ``argv``."""
    for n, arg in enumerate(argv):
        if arg == name and n + 1 < len(argv):
            return argv[n + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def start_own(port: int) -> LocalControlPlane:
    """Step 1: the demo's own control plane, on ``port`` if it can, saying why when not."""
    preferred = f"http://127.0.0.1:{port}"
    held = not port_is_free(port)
    other = control_plane_at(preferred) if held else None  # what holds it, before we start
    database = data_dir() / "demo" / "control-plane.db"
    control_plane = LocalControlPlane(prefer_port=port, database_path=database)
    try:
        control_plane.start()
    except DatabaseInUseError:
        control_plane.close()
        print(
            f"another demo is using the demo's database ({database}), so this one keeps its "
            "traces in a temporary database, removed when it ends"
        )
        control_plane = LocalControlPlane(prefer_port=port)
        control_plane.start()
    if control_plane.moved_from is not None:
        if not held:  # free when we looked: taken while ours started
            other = control_plane_at(preferred)
            print(f"port {port} was taken while this demo's control plane started")
        if other is not None:
            print(
                f"port {port} is held by another control plane (version {other.get('version')}"
                ", perhaps the Quickstart's, chronicle serve's or another demo's); this demo runs "
                "its own, with its own database, so the two do not share traces.\n"
                f"To record the demo into that one instead: {_python()} examples/demo.py "
                f"--control-plane {preferred}"
            )
        elif held:
            print(f"port {port} is held by another program (not a control plane)")
    print(f"control plane running at {control_plane.url} (database {control_plane.database_path})")
    return control_plane


def _python() -> str:
    """This interpreter, as a user would type it from here."""
    try:
        return str(Path(sys.executable).relative_to(Path.cwd()))
    except ValueError:
        return sys.executable


def record_and_replay(
    control_plane: LocalControlPlane | Running, pages: PageServer | None = None
) -> bool:
    """Steps 2 and 3; whether the fix holds. ``pages``: Chronicle's pages, linked to."""
    chronicle.configure(
        control_plane_url=control_plane.url, service_name="support-agent", agent=PROFILE
    )

    # ---- record ------------------------------------------------------------------------------
    labels = {"session_id": "sess-demo", "message_id": "msg-1", "user_id": "ada"}
    with chronicle.record("support-chat", labels=labels) as session:
        answer = agent.run_agent("Please clean up my old files.")
    chronicle.flush(10)
    print("\n1. recorded a run of the support agent")
    print(f"   agent answered: {answer!r}")
    print(f"   customers.db still exists: {'/var/data/customers.db' in agent.FILES}")
    print(f"   see it:   {session.url}")
    if pages is not None:
        print(f"   the page: {pages.trace_url(session.trace_id)}")
    print(f"   API:      {control_plane.url}/v1/traces/{session.trace_id}\n")
    tree = chronicle.show(session.trace_id, url=control_plane.url)
    text = tree.render(width=97, color=use_color(sys.stdout), ascii_only=not can_draw(sys.stdout))
    print("\n".join("   " + line if line else line for line in text.splitlines()))

    # ---- replay with the fix -----------------------------------------------------------------
    agent.TOOLS["delete_file"] = agent.delete_file_gated
    agent.FILES["/var/data/customers.db"] = "restored from backup"
    before = control_plane.snapshot()
    calls_before = agent.model_calls
    # The model's second call reads the gated tool's new result: its recording is stale.
    plan = chronicle.ReplayPlan().run("delete_file", 1).expect_change("model", 2)
    with chronicle.replay_trace(session.trace_id, session.span_id, plan, strict=True) as run:
        stale_answer = agent.run_agent("Please clean up my old files.")
    model_calls = agent.model_calls - calls_before
    result = run.captured_result("delete_file", 1)
    log = [f"{c.name}#{c.invocation_index}:{c.mode}" for c in run.call_log()]
    unchanged = control_plane.snapshot() == before
    stale = [(d.name, d.index, d.kind) for d in run.divergences()]

    print("\n2. replayed it with the gated delete_file as the cut-point (strict)")
    print(f"   call log: {', '.join(log)}")
    print(f"   delete_file returned: {result}")
    for divergence in run.divergences():
        print(f"   divergence ({'expected' if divergence.expected else 'unexpected'}):")
        print("     " + divergence.describe().replace("\n", "\n     "))
    print(f"   agent answered {stale_answer!r}: model#2's recorded answer, stale (see above)")
    print(f"   customers.db still exists: {'/var/data/customers.db' in agent.FILES}")
    print(f"   model calls during replay: {model_calls}")
    print(f"   control plane unchanged by the replay: {unchanged}")
    # The proof rests on what the fixed tool did, never on the stale model answer.
    holds = (
        result == {"blocked": True, "reason": "/var/data/customers.db is outside /tmp"}
        and "/var/data/customers.db" in agent.FILES
        and stale == [("model", 2, "input")]
        and model_calls == 0
        and unchanged
    )
    print(f"\nthe fix holds: {holds}")
    chronicle.shutdown()

    command = _command()
    print("\n3. find it again from the terminal, as a ticket would:")
    print(f"   export CHRONICLE_CONTROL_PLANE_URL={control_plane.url}")
    print(f"   {command} traces --user-id ada --since 1h")
    print(f"   {command} show {session.trace_id}")
    print(f"   {command} show {session.trace_id} --envelope delete_file#1")
    return holds


def main(argv: list[str]) -> int:
    exit_at_once = "--exit" in argv or os.environ.get(EXIT_AT_ONCE, "") not in ("", "0")
    running = _option(argv, "--control-plane")
    if running is not None:  # the user's control plane: record into it, start none, keep none
        if control_plane_at(running) is None:
            print(
                f"no control plane answers at {running}; start one (chronicle serve) or leave "
                "out --control-plane to have the demo start its own",
                file=sys.stderr,
            )
            return 1
        print(f"recording into the control plane at {running} (the demo started none)")
        try:
            return 0 if record_and_replay(Running(running)) else 1
        finally:
            chronicle.shutdown(1)
    port_text = _option(argv, "--port") or str(PORT)
    if not port_text.isdigit():
        print(f"--port takes a port number, got {port_text!r}", file=sys.stderr)
        return 2
    port = int(port_text)
    control_plane: LocalControlPlane | None = None
    pages: PageServer | None = None
    holds: bool | None = None  # set once the story is told; Ctrl-C after that is the way out
    stop_on_sigterm()
    try:
        control_plane = start_own(port)
        pages = PageServer(control_plane.url, prefer_port=control_plane.port + 1).start()
        holds = record_and_replay(control_plane, pages)
        if exit_at_once:
            return 0 if holds else 1
        print(
            f"\nthe control plane stays up at {control_plane.url} (Chronicle's pages at "
            f"{pages.url}/) so the pages and the commands work; press Ctrl-C to stop it"
        )
        sys.stdout.flush()
        while control_plane.running:
            time.sleep(0.25)
        print("the control plane stopped on its own", file=sys.stderr)
        return 1
    except LocalControlPlaneError as exc:  # what the server wrote says why
        print(f"the demo's control plane did not start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopped the control plane")
        return 130 if holds is None else 0 if holds else 1
    finally:
        chronicle.shutdown(1)
        if pages is not None:
            pages.close()
        if control_plane is not None:
            control_plane.close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
