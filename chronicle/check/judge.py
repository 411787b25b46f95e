"""The judge: a model asked what only a model can read, one structured question per rule.

For each instruction, each constraint that no code check decided, and the goal, the judge model
gets the rule, the agent's goal and the calls as evidence (each as ``chronicle show`` names it,
``issue_refund#1``, with its input and output cut to a few hundred characters), and answers
with one JSON object: ``{"verdict": "pass" | "fail" | "undetermined", "calls": [...],
"reason": "..."}``. An answer that is not that object, or a call that fails, is an
``undetermined`` verdict saying so, never an exception.

The client is wrapped (``chronicle.wrap``) before it is asked, so the judge's calls are
recorded like any agent's model calls (inside ``chronicle.record(...)`` they are one trace) and
replay in a test with no model. It is an OpenAI-compatible client (``chat.completions.create``)
or an Anthropic-style one (``messages.create``); ``judge_client("openai:gpt-4o-mini")`` builds
one from a ``PROVIDER:MODEL`` text, as ``chronicle evaluate --judge`` does.

A judge is one sample: an answer near the rule's edge may flip from one run to the next. With
``judge_runs=N`` each question is asked N times, with the same settings (the spread measured is
the one a CI run meets), and the verdict is the answer most runs gave, a tie ``undetermined``;
``Verdict.runs`` keeps each run's answer and ``pass_rate`` their share of ``pass``. Every run is
a recorded call, so a replay of the evaluation answers all N from the recording.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from chronicle.check.checks import Status, Subject, Verdict
from chronicle.errors import ConfigurationError, ReplayError
from chronicle.integrations.clients import wrap
from chronicle.read.traces import CallNode

__all__ = ["Judge", "judge_client", "judge_verdicts", "majority"]

_EACH = 600
"""Most characters of one call's input (and of its output) shown to the judge."""
_EVIDENCE = 16_000
"""Most characters of evidence in one question; the calls past it are named, not shown."""
_SYSTEM = (
    "You check an AI agent's recorded actions against one rule of its profile. Answer with one "
    'JSON object and nothing else: {"verdict": "pass" | "fail" | "undetermined", "calls": '
    '[the references of the calls that show it, exactly as given, e.g. "issue_refund#1"], '
    '"reason": "one sentence"}. Answer "undetermined" when the calls do not show whether the '
    "rule was followed."
)
_VERDICTS = ("pass", "fail", "undetermined")
_STATUSES: tuple[Status, ...] = ("pass", "fail", "undetermined")
_PROVIDERS = ("openai", "anthropic")


@dataclass(frozen=True)
class Judge:
    """A wrapped model client and the model it asks."""

    client: Any
    model: str
    shape: Literal["openai", "anthropic"]

    @classmethod
    def of(cls, client: object, model: str | None) -> Judge:
        """The judge of ``client`` (wrapped here) asking ``model``. Raises
        ``ConfigurationError`` for no model or a client of neither shape."""
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError(
                "judge_model", "names the model the judge asks (judge_model='gpt-4o-mini')"
            )
        if _has(client, "chat", "completions", "create"):
            shape: Literal["openai", "anthropic"] = "openai"
        elif _has(client, "messages", "create"):
            shape = "anthropic"
        else:
            raise ConfigurationError(
                "judge",
                f"expects an OpenAI-compatible client (chat.completions.create) or an "
                f"Anthropic-style one (messages.create), got {type(client).__name__}",
            )
        return cls(wrap(client), model.strip(), shape)

    def close(self) -> None:
        """Close the client's connections. For a judge ``judge_client`` built, which nothing
        else holds; a client given to ``evaluate`` is its caller's to close."""
        self.client.close()

    def ask(self, question: str) -> str:
        """The model's answer to ``question`` as text (the judge's system prompt set)."""
        if self.shape == "openai":
            reply = self.client.chat.completions.create(
                model=self.model,
                temperature=0,
                messages=[
                    {"role": "system", "content": _SYSTEM},
                    {"role": "user", "content": question},
                ],
            )
            return str(reply.choices[0].message.content or "")
        reply = self.client.messages.create(
            model=self.model,
            max_tokens=1024,
            system=_SYSTEM,
            messages=[{"role": "user", "content": question}],
        )
        return "".join(
            str(getattr(block, "text", "")) for block in reply.content if block.type == "text"
        )


def _has(obj: object, *path: str) -> bool:
    for name in path:
        obj = getattr(obj, name, None)
        if obj is None:
            return False
    return callable(obj)


def judge_client(spec: str) -> Judge:
    """The judge ``PROVIDER:MODEL`` names (``openai:gpt-4o-mini``,
    ``anthropic:claude-3-5-haiku-latest``): the provider's SDK client, configured from its own
    environment (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``ANTHROPIC_API_KEY``, ...). Raises
    ``ConfigurationError`` for another form or an SDK that is not installed. The caller closes
    it (``Judge.close``)."""
    provider, sep, model = spec.partition(":")
    provider = provider.strip().lower()
    if not sep or provider not in _PROVIDERS or not model.strip():
        raise ConfigurationError(
            "--judge",
            f"expects PROVIDER:MODEL with provider openai or anthropic (openai:gpt-4o-mini), "
            f"got {spec!r}",
        )
    try:
        if provider == "openai":
            import openai  # optional: only a judge needs the SDK

            client: object = openai.OpenAI(max_retries=1)
        else:
            import anthropic  # optional: only a judge needs the SDK

            client = anthropic.Anthropic(max_retries=1)
    except ImportError:
        raise ConfigurationError(
            "--judge", f"needs the {provider} SDK: pip install 'agentplane-chronicle[{provider}]'"
        ) from None
    except Exception as exc:  # the SDK refuses to build a client (no API key, say)
        raise ConfigurationError("--judge", f"the {provider} client: {exc}") from None
    return Judge.of(client, model)


def _cut(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
    return text if len(text) <= _EACH else text[: _EACH - 1] + "…"


def evidence(calls: list[CallNode]) -> str:
    """The calls as the judge reads them: one line each, in order."""
    lines: list[str] = []
    used = 0
    for index, node in enumerate(calls):
        envelope = node.envelope or {}
        body = envelope.get("input") or {}
        output = envelope.get("output") or {}
        if node.kind == "llm":
            said = [
                b.get("text")
                for b in output.get("content") or []
                if isinstance(b, dict) and b.get("type") == "text"
            ]
            asked = [
                {"tool": b.get("name"), "arguments": b.get("arguments")}
                for b in output.get("content") or []
                if isinstance(b, dict) and b.get("type") == "tool_call"
            ]
            line = (
                f"{node.label} (model {body.get('model')}): said {_cut(' '.join(map(str, said)))}"
                + (f"; asked for tool calls {_cut(asked)}" if asked else "")
            )
        else:
            result = output.get("error") or output.get("raw")
            line = (
                f"{node.label} (tool): input {_cut(body.get('raw'))}; "
                f"{'failed' if output.get('error') else 'returned'} {_cut(result)}"
            )
        if used + len(line) > _EVIDENCE:
            rest = ", ".join(n.label for n in calls[index:])
            lines.append(f"(not shown, for length: {rest})")
            break
        lines.append(line)
        used += len(line)
    return "\n".join(lines) or "(no calls)"


def _question(subject: Subject, kind: str, rule: str, shown: str) -> str:
    name = subject.form.get("name")
    goal = subject.form.get("goal") or "(none given)"
    return (
        f"Agent: {name}\nIts goal: {goal}\n\nThe rule to check ({kind}): {rule}\n\n"
        f"The agent's calls, in order:\n{shown}"
    )


def parse_answer(text: str, known: set[str]) -> tuple[str, tuple[str, ...], str] | str:
    """``(verdict, calls, reason)`` from the judge's answer, or why it is not the JSON asked
    for. Calls not among ``known`` are left out (and said so in the reason)."""
    body = text.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", body, re.DOTALL)
    if fenced:
        body = fenced.group(1)
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        return "it holds no JSON object"
    try:
        answer = json.loads(body[start : end + 1])
    except ValueError as exc:
        return f"its JSON does not parse ({exc})"
    if not isinstance(answer, dict):
        return "it is not a JSON object"
    verdict = answer.get("verdict")
    if verdict not in _VERDICTS:
        return f"its verdict is {verdict!r}, not pass, fail or undetermined"
    calls = answer.get("calls", [])
    if not isinstance(calls, list) or not all(isinstance(c, str) for c in calls):
        return "its calls are not a list of call references"
    reason = answer.get("reason", "")
    if not isinstance(reason, str):
        return "its reason is not text"
    unknown = [c for c in calls if c not in known]
    if unknown:
        reason = f"{reason} (it named calls that are not in the trace: {', '.join(unknown)})"
    return str(verdict), tuple(c for c in calls if c in known), reason.strip()


def judge_verdicts(
    subject: Subject, judge: Judge, decided: list[Verdict], runs: int = 1
) -> list[Verdict]:
    """The judge's verdicts for ``subject``: each instruction, each constraint ``decided`` left
    undetermined, and the goal, each asked ``runs`` times (``majority``). Never raises but for
    a ``ReplayError`` (a replay of the judge that does not match its recording must say so)."""
    agent_id = str(subject.form.get("agent_id") or "")
    shown = evidence(subject.calls)
    known = {node.label for node in subject.calls}
    rules: list[tuple[str, str]] = []
    instructions = subject.form.get("instructions")
    for text in instructions if isinstance(instructions, list) else []:
        rules.append(("instruction", str(text)))
    open_constraints = {
        v.rule for v in decided if v.check == "constraint" and v.status == "undetermined"
    }
    constraints = subject.form.get("constraints")
    for text in constraints if isinstance(constraints, list) else []:
        if str(text) in open_constraints:
            rules.append(("constraint", str(text)))
    goal = subject.form.get("goal")
    if isinstance(goal, str) and goal:
        rules.append(("goal", goal))
    found: list[Verdict] = []
    for kind, rule in rules:
        question = _question(subject, kind, rule, shown)
        answers = [_one_answer(judge, question, kind, rule, known, agent_id) for _ in range(runs)]
        found.append(answers[0] if runs == 1 else majority(answers))
    return found


def _one_answer(
    judge: Judge, question: str, kind: str, rule: str, known: set[str], agent_id: str
) -> Verdict:
    """The judge's answer to one question, asked once, as a verdict."""
    try:
        answer = judge.ask(question)
    except ReplayError:
        raise
    except Exception as exc:
        reason = f"the judge's call failed: {type(exc).__name__}: {str(exc)[:200]}"
        return Verdict(kind, rule, "undetermined", (), reason, agent_id, "judge")
    parsed = parse_answer(answer, known)
    if isinstance(parsed, str):
        snippet = " ".join(answer.split())[:120]
        reason = f"the judge's answer is not the JSON asked for: {parsed} ({snippet!r})"
        return Verdict(kind, rule, "undetermined", (), reason, agent_id, "judge")
    verdict, calls, reason = parsed
    return Verdict(kind, rule, verdict, calls, reason, agent_id, "judge")  # type: ignore[arg-type]


def majority(answers: list[Verdict]) -> Verdict:
    """One verdict of several runs of the same question: the status most runs gave (a tie
    between the most given: ``undetermined``), the calls and first reason of the runs that gave
    it, each run's status in ``runs`` and so its ``pass_rate``. A run whose call failed or whose
    answer was not the JSON asked for counts as ``undetermined``."""
    statuses = tuple(a.status for a in answers)
    counts: dict[Status, int] = {s: statuses.count(s) for s in _STATUSES}
    most = max(counts.values())
    leaders = [s for s, n in counts.items() if n == most]
    total = len(answers)
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    rate = f"pass rate {counts['pass'] / total:.2g}"
    first = answers[0]
    if len(leaders) > 1:
        reason = f"a tie over {total} judge runs ({tally}; {rate}): no majority"
        return dataclasses.replace(
            first, status="undetermined", calls=(), reason=reason, runs=statuses
        )
    status = leaders[0]
    agreeing = [a for a in answers if a.status == status]
    calls = tuple(dict.fromkeys(c for a in agreeing for c in a.calls))
    reason = f"{most} of {total} judge runs say {status} ({tally}; {rate}): {agreeing[0].reason}"
    return dataclasses.replace(first, status=status, calls=calls, reason=reason, runs=statuses)
