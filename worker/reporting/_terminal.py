"""The report in a terminal (the default ``evalq report`` output), as rich renderables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ._model import (
    Calibration,
    EvalReport,
    GoldReport,
    OutcomeView,
    SamplingView,
    SliceCoverage,
)
from ._statistics import Rate, WeightedRate

__all__ = ["render_terminal"]


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def _short(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}"


def _rate(rate: Rate) -> str:
    """``83% [44-97] 5/6``: estimate, Wilson 95 % bounds (percent), counts."""
    if rate.value is None:
        return f"— 0/{rate.denominator}"
    bounds = f"[{_short(rate.low)}-{_short(rate.high)}]"
    return f"{_short(rate.value)}% {bounds} {rate.numerator}/{rate.denominator}"


def _weighted(rate: WeightedRate | None) -> str:
    if rate is None or rate.value is None:
        return "—"
    bounds = f"[{_short(rate.low)}-{_short(rate.high)}]"
    return f"{_short(rate.value)}% {bounds} n_eff {rate.effective_n:.1f}"


def _key_column(table: Table, name: str) -> None:
    table.add_column(name, no_wrap=True)


def _pairs(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def _banner(report: EvalReport) -> RenderableType:
    if report.synthetic:
        return Panel(
            Text(
                "SYNTHETIC JUDGE — these results are deterministic placeholder answers, "
                "not a model's judgment.",
                style="bold",
            ),
            style="bold black on yellow",
        )
    judges = ", ".join(f"{j.kind} ({j.model or 'default'})" for j in report.judges)
    return Text(f"Judges: {judges or 'none in scope'}")


def _header(report: EvalReport) -> RenderableType:
    lines = [
        f"store: {report.store}",
        f"snapshots: {report.snapshots}  evaluations: {report.evaluations} (each unit's newest; "
        f"{report.superseded_evaluations} superseded)  sends: {report.sends} "
        f"({report.duplicate_sends} duplicate)  open dead letters: {report.dead_letters_open}",
        f"metric-set versions: {_pairs(report.metric_set_versions) or '—'}",
    ]
    return Text("\n".join(lines))


def _metrics_title(report: EvalReport) -> str:
    title = "Metrics (rate% [95% interval] count)"
    if report.pooled and len(report.versions) > 1:
        return f"{title} — metric-set versions pooled (--pool-versions)"
    if report.metrics_version is not None and len(report.versions) > 1:
        return f"{title} — metric-set version {report.metrics_version} (the most recent)"
    return title


def _versions_table(report: EvalReport) -> Table | None:
    """Every metric-set version side by side: counted, superseded, each metric's pass rate."""
    if len(report.versions) < 2:
        return None
    table = Table(title="Metric-set versions side by side (pass rate, DECIDED)")
    _key_column(table, "")
    for version in report.versions:
        table.add_column(version.metric_set_version)
    table.add_row("evaluations counted", *(str(v.evaluations) for v in report.versions))
    table.add_row("superseded", *(str(v.superseded) for v in report.versions))
    for metric_id in sorted({m for v in report.versions for m in v.metrics}):
        cells = [v.metrics.get(metric_id) for v in report.versions]
        table.add_row(metric_id, *(_rate(m.pass_rate) if m else "—" for m in cells))
    return table


def _metrics_table(report: EvalReport) -> Table:
    table = Table(title=_metrics_title(report))
    _key_column(table, "metric")
    for name in ("pass rate (DECIDED)", "scorable coverage", "missing evidence"):
        table.add_column(name)
    if report.weighted:
        table.add_column("weighted pass rate")
        table.add_column("weighted coverage")
    for metric_id, m in report.metrics.items():
        cells = [metric_id, _rate(m.pass_rate), _rate(m.coverage), _rate(m.missing_evidence)]
        if report.weighted:
            w = m.weighted
            cells += [_weighted(w.pass_rate if w else None), _weighted(w.coverage if w else None)]
        table.add_row(*cells)
    return table


def _reasons_table(report: EvalReport) -> Table:
    table = Table(title="Statuses and reasons")
    _key_column(table, "metric")
    table.add_column("by status")
    table.add_column("by reason")
    for metric_id, m in report.metrics.items():
        table.add_row(metric_id, _pairs(m.by_status), _pairs(m.by_reason))
    return table


def _gold_tables(gold: GoldReport) -> list[RenderableType]:
    columns = ("total", "labelled", "correct", "incorrect", "inconclusive", "skipped", "errors")
    table = Table(
        title=f"Against gold labels (scenario = {gold.scenario_by})",
        caption="n total, lab labelled, ok correct, bad incorrect, abs inconclusive, skp skipped,"
        " err errors, uns unscored; acc = ok / lab (docs/semantics.md §8)",
    )
    _key_column(table, "scenario / metric")
    for name in ("n", "lab", "ok", "bad", "abs", "skp", "err", "uns", "acc"):
        table.add_column(name, justify="right", no_wrap=True)
    labelled = {m for m, s in gold.metrics.items() if s.labelled}
    for scenario, summaries in [("(all)", gold.metrics), *gold.scenarios.items()]:
        table.add_row(Text(scenario, style="bold"), end_section=False)
        for metric_id, s in summaries.items():
            if metric_id not in labelled:
                continue  # metrics without labels: JSON only
            accuracy = f"{_short(s.accuracy)}%" if s.labelled else "—"
            values = [str(getattr(s, c)) for c in (*columns, "unscored")]
            table.add_row(f"  {metric_id}", *values, accuracy)
    out: list[RenderableType] = [table]
    for metric_id, c in gold.confusion.items():
        matrix = Table(f"{metric_id}: expected \\ actual", *c.actual, title="Confusion")
        for expected in c.expected:
            matrix.add_row(expected, *(str(c.counts[expected][a]) for a in c.actual))
        out.append(matrix)
    if gold.calibration:
        out.append(_calibration_table(gold.calibration))
    return out


def _calibration_table(calibrations: Sequence[Calibration]) -> Table:
    table = Table("metric", "judge", "probabilities", "n", "ECE", "bins (n: mean→observed)")
    table.title = "Calibration"
    for c in calibrations:
        bins = "; ".join(
            f"{b.low:.1f}-{b.high:.1f} {b.n}: {b.mean_predicted:.2f}→{b.observed:.2f}"
            for b in c.bins
            if b.n and b.mean_predicted is not None and b.observed is not None
        )
        ece = "—" if c.ece is None else f"{c.ece:.3f}"
        source = (
            c.probability_source.upper()
            if c.probability_source == "synthetic"
            else (c.probability_source)
        )
        table.add_row(c.metric_id, c.judge_kind, source, str(c.n), ece, bins)
    return table


def _latency_usage(report: EvalReport) -> Text:
    u = report.usage
    usage = (
        f"usage: {u.requests} requests, {u.responses_with_usage} with usage, "
        f"{u.input_tokens} input + {u.output_tokens} output tokens"
    )
    if u.incomplete:
        usage += " (incomplete: some responses reported no usage)"
    lat = report.latency
    return Text(f"latency (n={lat.n}): P50 {lat.p50_ms:.1f} ms, P95 {lat.p95_ms:.1f} ms\n{usage}")


def _sampling_text(view: SamplingView) -> Text:
    if not view.recorded:
        return Text("sampled out: unknown (no sampling tally recorded for this range)")
    return Text(
        f"sampling: {view.seen} units seen, {view.sampled} sampled, "
        f"{view.sampled_out} sampled out (not evaluated)"
    )


def _outcome_table(view: OutcomeView) -> Table:
    table = Table("metric", "judgment", "outcome", "value", "n")
    table.title = (
        f"Outcome-linked ({view.linked_evaluations} evaluations, {view.linked_outcomes} outcomes)"
    )
    for r in view.rows:
        table.add_row(r.metric_id, r.judgment, r.outcome, r.value, str(r.n))
    return table


def _coverage_table(coverage: SliceCoverage) -> Table:
    table = Table(coverage.slice_by, "results", "scorable coverage", title="Coverage by slice")
    for row in coverage.rows:
        table.add_row(row.value, str(row.results), _rate(row.coverage))
    return table


def render_terminal(report: EvalReport) -> RenderableType:
    """The report as rich renderables (the default ``evalq report`` output)."""
    parts: list[RenderableType] = [_banner(report), _header(report), _metrics_table(report)]
    versions = _versions_table(report)
    if versions is not None:
        parts.append(versions)
    parts.append(_reasons_table(report))
    parts.append(_coverage_table(report.coverage))
    if report.gold is not None:
        parts.extend(_gold_tables(report.gold))
    parts.append(_latency_usage(report))
    if report.sampling is not None:
        parts.append(_sampling_text(report.sampling))
    if report.outcomes.rows:
        parts.append(_outcome_table(report.outcomes))
    parts.extend(Text(note, style="dim") for note in report.notes)
    if report.synthetic:
        parts.append(_banner(report))
    return Group(*parts)
