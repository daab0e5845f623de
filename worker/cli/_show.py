"""``evalq show SNAPSHOT_ID [--json]``: one snapshot's evaluations, auditable on their own.

Per evaluation: metric set and version, judge, lane, window; per metric: status, reason,
score/label/passed, the questions it asked (id, sha256 and exact text), the sha256 of the state
its judge request sent, the resolved judge model (and whether the judge reported it), the window
rule and cutoff; then the linked outcomes and the criteria still pending. It reads the records
only, never the snapshot's content, so it works the same after ``evalq purge`` (an expired
question text shows as expired, its digest stays).

``--json`` prints one JSON document (:func:`document`; keys documented in docs/records.md and
kept stable: new keys may be added, none renamed or removed).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from ._common import invalid, settings, store

if TYPE_CHECKING:
    from worker.store import (
        MetricResultRecord,
        OutcomeLink,
        ReviewedEvaluation,
        SnapshotReview,
        Store,
    )

__all__ = [
    "AMBIGUOUS_SNAPSHOT_ID",
    "BAD_SNAPSHOT_ID",
    "EPILOG",
    "JSON_VERSION",
    "MAX_EVALUATIONS",
    "document",
    "show",
]

AMBIGUOUS_SNAPSHOT_ID = "AMBIGUOUS_SNAPSHOT_ID"
"""A prefix that starts more than one stored snapshot id."""
BAD_SNAPSHOT_ID = "BAD_SNAPSHOT_ID"
"""Not a snapshot id: 8 to 64 hex digits are expected."""
JSON_VERSION = 1
"""``format_version`` of the ``--json`` document (bumped only if a key changes meaning)."""
MAX_EVALUATIONS = 100
"""Evaluations shown per snapshot, oldest first (``more_evaluations`` says if there are more)."""
_ID_LENGTH = 64
EPILOG = (
    "Example: evalq show 0b316d6d95753c58 --json  (a full snapshot id or a unique prefix of "
    "at least 8 hex digits, as evalq results prints it; read-only, works after evalq purge)"
)


def show(
    snapshot_id: Annotated[
        str,
        typer.Argument(
            help="The snapshot id, or a unique prefix of at least 8 hex digits",
            show_default=False,
        ),
    ],
    *,
    as_json: Annotated[
        bool,
        typer.Option("--json", envvar="EVALQ_SHOW_JSON", help="One JSON document (stable keys)"),
    ] = False,
) -> None:
    """A snapshot's evaluations: per metric the status, reason, score, the exact questions asked,
    the state digest, the judge model, window and cutoff; and the linked outcomes."""
    wanted = _normalized(snapshot_id)
    config = settings()
    with store(config, existing=True) as opened:
        full = _resolve(opened, wanted)
        review = opened.snapshot_review(full, MAX_EVALUATIONS)
        location = opened.location
    if review is None:
        _unknown(full, location)
    if as_json:
        sys.stdout.write(json.dumps(document(review), sort_keys=True, ensure_ascii=False) + "\n")
        return
    # Written as they are: a question text must print byte for byte (Rich would still turn
    # ":x:" into an emoji and wrap long lines, even with markup off).
    sys.stdout.write("".join(f"{line}\n" for line in lines(review)))


def _normalized(snapshot_id: str) -> str:
    from worker.store import MIN_PREFIX  # noqa: PLC0415 - fast --help

    wanted = snapshot_id.strip().lower()
    if not (MIN_PREFIX <= len(wanted) <= _ID_LENGTH) or not set(wanted) <= set("0123456789abcdef"):
        invalid(
            f"SNAPSHOT_ID: expected a snapshot id, {MIN_PREFIX} to {_ID_LENGTH} hex digits "
            f"({BAD_SNAPSHOT_ID})"
        )
    return wanted


def _resolve(opened: Store, wanted: str) -> str:
    """The full id ``wanted`` names (a full id is looked up as it is), or exit 2 naming why."""
    if len(wanted) == _ID_LENGTH:
        return wanted
    found = opened.snapshot_ids_with_prefix(wanted)
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        invalid(
            f"snapshot {wanted}: the prefix matches more than one snapshot; give more digits "
            f"({AMBIGUOUS_SNAPSHOT_ID})"
        )
    return _unknown(wanted, opened.location)


def _unknown(wanted: str, location: str) -> NoReturn:
    from worker.store import StoreCode  # noqa: PLC0415 - fast --help

    invalid(f"snapshot {wanted}: not in the store at {location} ({StoreCode.UNKNOWN_SNAPSHOT})")


# --- the JSON document -------------------------------------------------------------------------


def document(review: SnapshotReview) -> dict[str, Any]:
    """The ``--json`` document of a snapshot's review (every key always present)."""
    snap = review.snapshot
    return {
        "format_version": JSON_VERSION,
        "snapshot": {
            "snapshot_id": snap.snapshot_id,
            "trace_id": snap.trace_id,
            "session_id": snap.session_id,
            "unit_kind": snap.unit_kind,
            "unit_event_id": snap.unit_event_id,
            "window": _window(snap.window_rule, snap.cutoff_event_id, snap.cutoff_time),
            "agent_version": snap.agent_version,
            "environment": snap.environment,
            "tool": snap.tool,
            "content_kept": snap.has_content,
        },
        "evaluations": [_evaluation(reviewed) for reviewed in review.evaluations],
        "more_evaluations": review.more,
    }


def _window(rule: str, cutoff_event_id: str, cutoff_time: Any) -> dict[str, Any]:
    return {
        "rule": rule,
        "cutoff_event_id": cutoff_event_id,
        "cutoff_time": None if cutoff_time is None else cutoff_time.isoformat(),
    }


def _evaluation(reviewed: ReviewedEvaluation) -> dict[str, Any]:
    stored = reviewed.evaluation
    record = stored.record
    window = _window(stored.window_rule, stored.cutoff_event_id, stored.cutoff_time)
    return {
        "evaluation_id": stored.evaluation_id,
        "created_at": stored.created_at.isoformat(),
        "previous_evaluation_id": stored.previous_evaluation_id,
        "metric_set": record.metric_set,
        "metric_set_version": record.metric_set_version,
        "run": record.run,
        "lane": record.lane,
        "judge_kind": record.judge_kind,
        "judge_model": record.judge_model,
        "synthetic": record.synthetic,
        "requests": record.requests,
        "elapsed_s": record.elapsed_s,
        "window": window,
        "metrics": [_metric(result, window) for result in record.results],
        "outcomes": [_outcome(link) for link in reviewed.outcomes],
        "pending_outcomes": list(reviewed.pending),
    }


def _metric(result: MetricResultRecord, window: dict[str, Any]) -> dict[str, Any]:
    audit = result.audit
    return {
        "metric_id": result.metric_id,
        "metric_version": result.metric_version,
        "status": result.status,
        "reason": result.reason,
        "score": result.score,
        "label": result.label,
        "passed": result.passed,
        "questions": _questions(result),
        "state_sha256": None if audit is None else audit.state_sha256,
        "judge_model": result.judge_model if audit is None else audit.judge_model,
        "judge_model_reported": None if audit is None else audit.judge_model_reported,
        "audited": audit is not None,
        "window": window,
    }


def _questions(result: MetricResultRecord) -> list[dict[str, Any]]:
    """The audit's questions (id, sha256, text: None once expired); without an audit (records
    of schema 3, or questions never sent) the recorded ids alone."""
    if result.audit is None:
        return [{"id": qid, "sha256": None, "text": None} for qid in result.question_ids]
    asked = result.audit.questions
    return [{"id": q.question_id, "sha256": q.sha256, "text": q.text} for q in asked]


def _outcome(link: OutcomeLink) -> dict[str, Any]:
    outcome = link.outcome
    return {
        "event_id": outcome.event_id,
        "name": outcome.name,
        "value": _plain(outcome.value),
        "unit_event_id": outcome.unit_event_id,
        "observed_at": outcome.observed_at.isoformat(),
        "received_at": link.received_at.isoformat(),
        "linked_at": link.linked_at.isoformat(),
    }


def _plain(value: Any) -> Any:
    from worker.canonical_json import thaw  # noqa: PLC0415 - fast --help

    return thaw(value)


# --- the terminal form ---------------------------------------------------------------------------


def lines(review: SnapshotReview) -> list[str]:
    """The human-readable form: the snapshot, then each evaluation with its metrics."""
    doc = document(review)
    snap = doc["snapshot"]
    event = snap["unit_event_id"]
    unit = snap["unit_kind"] + ("" if event is None else f" {event}")
    from worker.store import StoreCode  # noqa: PLC0415 - fast --help

    expired = f"expired by a purge ({StoreCode.CONTENT_NOT_KEPT})"
    content = "kept" if snap["content_kept"] else expired
    result = [
        f"snapshot {snap['snapshot_id']}",
        f"  trace {snap['trace_id']}  unit {unit}  {_window_text(snap['window'])}",
        f"  content {content}",
    ]
    evaluations = doc["evaluations"]
    if not evaluations:
        result.append("  no evaluations recorded")
    for n, evaluation in enumerate(evaluations, start=1):
        result.extend(_evaluation_lines(evaluation, n, len(evaluations)))
    if doc["more_evaluations"]:
        result.append(f"(only the first {MAX_EVALUATIONS} evaluations are shown)")
    return result


def _window_text(window: dict[str, Any]) -> str:
    at = "" if window["cutoff_time"] is None else f" at {window['cutoff_time']}"
    return f"window {window['rule']} cutoff {window['cutoff_event_id']}{at}"


def _evaluation_lines(evaluation: dict[str, Any], n: int, total: int) -> list[str]:
    judge = evaluation["judge_kind"] + (
        "" if evaluation["judge_model"] is None else f" ({evaluation['judge_model']})"
    )
    run = f"  run {evaluation['run']}" if evaluation["run"] else ""
    head = [
        f"evaluation {n}/{total} {evaluation['evaluation_id']}",
        f"  recorded {evaluation['created_at']}  lane {evaluation['lane']}{run}",
        f"  metric set {evaluation['metric_set_version']}  judge {judge}"
        f"{'  SYNTHETIC' if evaluation['synthetic'] else ''}  requests {evaluation['requests']}",
    ]
    body = [line for metric in evaluation["metrics"] for line in _metric_lines(metric)]
    return [*head, *body, *_outcome_lines(evaluation)]


def _verdict(metric: dict[str, Any]) -> str:
    score = "" if metric["score"] is None else f" {metric['score']:.2f}"
    if metric["passed"] is not None:
        verdict = ("pass" if metric["passed"] else "fail") + score
    else:
        verdict = score.strip() or "-"
    return verdict if metric["label"] is None else f"{verdict} label {metric['label']}"


def _metric_lines(metric: dict[str, Any]) -> list[str]:
    lines_ = [
        f"  {metric['metric_id']} v{metric['metric_version']}  {metric['status']}  "
        f"{metric['reason']}  {_verdict(metric)}",
        f"    {_window_text(metric['window'])}",
    ]
    if metric["audited"]:
        source = "reported by the judge" if metric["judge_model_reported"] else "configured"
        lines_.append(f"    judge model {metric['judge_model'] or '-'} ({source})")
        lines_.append(f"    state sha256 {metric['state_sha256']}")
    elif metric["questions"]:
        lines_.append("    not audited (recorded before schema 4): question ids only")
    for question in metric["questions"]:
        digest = "" if question["sha256"] is None else f"  sha256 {question['sha256']}"
        lines_.append(f"    question {question['id']}{digest}")
        if question["text"] is not None:
            lines_.append(f"      {question['text']}")
        elif question["sha256"] is not None:
            lines_.append("      (text expired by a purge)")
    return lines_


def _outcome_lines(evaluation: dict[str, Any]) -> list[str]:
    lines_ = [
        f"  outcome {o['name']} = {json.dumps(o['value'], sort_keys=True, ensure_ascii=False)}"
        f"  event {o['event_id']}  observed {o['observed_at']}  linked {o['linked_at']}"
        for o in evaluation["outcomes"]
    ]
    if not evaluation["outcomes"]:
        lines_.append("  outcomes: none linked")
    if evaluation["pending_outcomes"]:
        lines_.append(f"  pending outcomes: {', '.join(evaluation['pending_outcomes'])}")
    return lines_
