"""``evalq report --html FILE``: one self-contained static page with inline SVG plots.

No server, no CDN, no script: the page is HTML, inline CSS and SVG drawn here in Python from an
:class:`~worker.reporting.EvalReport`, so it opens from a file, a mail attachment or an artifact
store exactly as written. Every value is HTML-escaped.

Plots (each an ``<svg>`` with a stable ``id`` and ``data-plot`` attribute, always present — with an
empty-state message when the report has no data for it):

- ``plot-status-mix``: status mix per metric (passed, failed, decided without verdict,
  inconclusive, skipped, error) as stacked bars;
- ``plot-pass-rate``: pass rate among DECIDED and scorable coverage side by side, with their
  Wilson 95 % intervals (and the sampling-weighted pass rate when weights are present);
- ``plot-coverage-time``: scorable coverage per slice value over time buckets;
- ``plot-latency``: histogram of evaluation elapsed time, with P50/P95;
- ``plot-calibration``: reliability curves of the judge's probabilities against gold labels,
  labelled with where the probabilities come from (SYNTHETIC, self-reported, backend-reported).

A report that includes a synthetic-judge evaluation carries a SYNTHETIC banner at the top.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape

from ._model import (
    Calibration,
    CoverageSeries,
    EvalReport,
    GoldReport,
    Latency,
    MetricReport,
    OutcomeView,
    SamplingView,
    SliceCoverage,
)
from ._statistics import Rate, WeightedRate

__all__ = [
    "PLOT_IDS",
    "calibration_svg",
    "coverage_time_svg",
    "latency_svg",
    "pass_rate_svg",
    "render_html",
    "status_mix_svg",
]

PLOT_IDS = (
    "plot-status-mix",
    "plot-pass-rate",
    "plot-coverage-time",
    "plot-latency",
    "plot-calibration",
)
"""The ``id`` of every plot the page holds."""

_WIDTH = 880
_LABEL_W = 170
_ROW_H = 26
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
_SEGMENTS = (
    ("passed", "#2e7d32"),
    ("failed", "#c62828"),
    ("decided, no verdict", "#81c784"),
    ("inconclusive", "#f9a825"),
    ("skipped", "#9e9e9e"),
    ("error", "#6a1b9a"),
)

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px;
  color: #1a1a1a; background: #fff; max-width: 960px; }
h1 { font-size: 26px; margin: 0 0 4px; } h2 { font-size: 19px; margin: 28px 0 8px;
  border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta { color: #555; font-size: 13px; }
.synthetic { background: #ffeb3b; border: 3px solid #c62828; color: #000; font-weight: 700;
  font-size: 20px; padding: 12px 16px; margin: 12px 0; }
.kpis { display: flex; flex-wrap: wrap; gap: 12px; margin: 12px 0; }
.kpi { border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; min-width: 120px; }
.kpi b { display: block; font-size: 20px; } .kpi span { color: #555; font-size: 12px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f5f5f5; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
svg { display: block; margin: 8px 0; } svg text { font-size: 12px; fill: #222; }
.note { color: #555; font-size: 12px; margin: 2px 0; }
"""


# --- formatting --------------------------------------------------------------------------------


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f}%"


def _rate(rate: Rate) -> str:
    if rate.value is None:
        return f"— (0/{rate.denominator})"
    return (
        f"{_pct(rate.value)} [{_pct(rate.low)}, {_pct(rate.high)}] "
        f"({rate.numerator}/{rate.denominator})"
    )


def _weighted(rate: WeightedRate | None) -> str:
    if rate is None or rate.value is None:
        return "—"
    return f"{_pct(rate.value)} [{_pct(rate.low)}, {_pct(rate.high)}] n_eff {rate.effective_n:.1f}"


def _table(head: Sequence[str], rows: Iterable[Sequence[object]], numeric_from: int = 99) -> str:
    header = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="n">{_e(c)}</td>' if i >= numeric_from else f"<td>{_e(c)}</td>"
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{header}</tr></thead><tbody>{''.join(body)}</tbody></table>"


# --- svg primitives ----------------------------------------------------------------------------


def _svg(plot_id: str, title: str, height: int, body: str, width: int = _WIDTH) -> str:
    return (
        f'<svg id="{plot_id}" data-plot="{plot_id}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{_e(title)}"><title>{_e(title)}</title>{body}</svg>'
    )


def _text(x: float, y: float, text: str, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" {extra}>{_e(text)}</text>'


def _rect(x: float, y: float, w: float, h: float, fill: str, *, title: str = "") -> str:
    tip = f"<title>{_e(title)}</title>" if title else ""
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" '
        f'fill="{fill}">{tip}</rect>'
    )


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str, *, extra: str = "") -> str:
    return (
        f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}" {extra}/>'
    )


def _empty(plot_id: str, title: str, message: str) -> str:
    body = _text(_WIDTH / 2, 40, message, "middle", 'fill="#777"')
    return _svg(plot_id, title, 70, body)


def _legend(items: Sequence[tuple[str, str]], y: float, x0: float = _LABEL_W) -> str:
    parts, x = [], x0
    for label, color in items:
        parts.append(_rect(x, y - 10, 12, 12, color))
        parts.append(_text(x + 16, y, label))
        x += 24 + 7 * len(label)
    return "".join(parts)


def _percent_axis(x0: float, width: float, y_top: float, y_bottom: float) -> str:
    parts = []
    for tick in (0, 25, 50, 75, 100):
        x = x0 + width * tick / 100
        parts.append(_line(x, y_top, x, y_bottom, "#e0e0e0"))
        parts.append(_text(x, y_bottom + 14, f"{tick}%", "middle"))
    return "".join(parts)


# --- plots -------------------------------------------------------------------------------------


def _segments(m: MetricReport) -> tuple[int, ...]:
    s = m.by_status
    return (
        m.passed,
        m.failed,
        m.decided_without_verdict,
        s.get("INCONCLUSIVE", 0),
        s.get("SKIPPED", 0),
        s.get("ERROR", 0),
    )


def status_mix_svg(metrics: dict[str, MetricReport]) -> str:
    """Stacked bars: each metric's results by status (DECIDED split by verdict)."""
    title = "Status mix per metric"
    if not metrics:
        return _empty("plot-status-mix", title, "no results in scope")
    plot_w = _WIDTH - _LABEL_W - 60
    parts = []
    for row, (metric_id, m) in enumerate(metrics.items()):
        y = 10 + row * _ROW_H
        parts.append(_text(_LABEL_W - 8, y + 15, metric_id, "end"))
        x = float(_LABEL_W)
        for (name, color), n in zip(_SEGMENTS, _segments(m), strict=True):
            w = plot_w * n / m.total if m.total else 0
            parts.append(_rect(x, y, w, _ROW_H - 6, color, title=f"{metric_id}: {name} {n}"))
            x += w
        parts.append(_text(x + 6, y + 15, str(m.total)))
    height = 10 + len(metrics) * _ROW_H
    parts.append(_legend([(n, c) for n, c in _SEGMENTS], height + 14))
    return _svg("plot-status-mix", title, height + 26, "".join(parts))


def _interval(x0: float, w: float, y: float, rate: Rate | WeightedRate, color: str) -> str:
    """A dot at the estimate and a whisker over its interval (or "no data")."""
    if rate.value is None or rate.low is None or rate.high is None:
        return _text(x0 + 4, y + 4, "no data", extra='fill="#999"')
    low, high, dot = x0 + w * rate.low, x0 + w * rate.high, x0 + w * rate.value
    stroke = 'stroke-width="2"'
    return (
        _line(low, y, high, y, color, extra=stroke)
        + _line(low, y - 4, low, y + 4, color, extra=stroke)
        + _line(high, y - 4, high, y + 4, color, extra=stroke)
        + f'<circle cx="{dot:.1f}" cy="{y:.1f}" r="4.5" fill="{color}"/>'
    )


def pass_rate_svg(metrics: dict[str, MetricReport]) -> str:
    """Pass rate among DECIDED and scorable coverage per metric, with 95 % intervals."""
    title = "Pass rate (DECIDED) and scorable coverage with 95% intervals"
    if not metrics:
        return _empty("plot-pass-rate", title, "no results in scope")
    row_h = 40
    plot_w = _WIDTH - _LABEL_W - 30
    parts = [_percent_axis(_LABEL_W, plot_w, 4, 8 + len(metrics) * row_h)]
    for row, (metric_id, m) in enumerate(metrics.items()):
        y = 8 + row * row_h
        parts.append(_text(_LABEL_W - 8, y + 22, metric_id, "end"))
        parts.append(_interval(_LABEL_W, plot_w, y + 9, m.pass_rate, _PALETTE[0]))
        parts.append(_interval(_LABEL_W, plot_w, y + 21, m.coverage, _PALETTE[1]))
        if m.weighted is not None:
            parts.append(_interval(_LABEL_W, plot_w, y + 33, m.weighted.pass_rate, _PALETTE[2]))
    bottom = 8 + len(metrics) * row_h + 34
    legend = [("pass rate among DECIDED", _PALETTE[0]), ("scorable coverage", _PALETTE[1])]
    if any(m.weighted is not None for m in metrics.values()):
        legend.append(("weighted pass rate", _PALETTE[2]))
    parts.append(_legend(legend, bottom))
    return _svg("plot-pass-rate", title, bottom + 12, "".join(parts))


def _time_label(value: datetime, bucket_s: int) -> str:
    return value.strftime("%Y-%m-%d" if bucket_s >= 86400 else "%Y-%m-%d %H:%M UTC")


@dataclass(frozen=True)
class _Frame:
    """A plot area: left x, top y, width and height in SVG pixels."""

    x0: float
    top: float
    width: float
    height: float


def _percent_rows(frame: _Frame) -> str:
    parts = []
    for tick in (0, 25, 50, 75, 100):
        y = frame.top + frame.height * (1 - tick / 100)
        parts.append(_line(frame.x0, y, frame.x0 + frame.width, y, "#e0e0e0"))
        parts.append(_text(frame.x0 - 6, y + 4, f"{tick}%", "end"))
    return "".join(parts)


def _series_marks(
    series: CoverageSeries, xs: dict[datetime, float], frame: _Frame, color: str
) -> str:
    points = [
        (xs[p.start], frame.top + frame.height * (1 - p.decided / p.results), p)
        for p in series.points
        if p.results
    ]
    parts = []
    if len(points) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
    for x, y, p in points:
        tip = _e(f"{series.value}: {p.decided}/{p.results} decided")
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"><title>{tip}</title></circle>'
        )
    return "".join(parts)


def coverage_time_svg(coverage: SliceCoverage) -> str:
    """Scorable coverage per slice value, one line per value over the time buckets."""
    title = f"Scorable coverage by {coverage.slice_by} over time"
    starts = sorted({p.start for s in coverage.series for p in s.points})
    if not starts:
        return _empty("plot-coverage-time", title, "no results in scope")
    frame = _Frame(x0=60.0, top=10.0, width=_WIDTH - 90.0, height=160.0)
    step = frame.width / max(len(starts) - 1, 1)
    single = len(starts) == 1
    xs = {t: frame.x0 + (frame.width / 2 if single else i * step) for i, t in enumerate(starts)}
    parts = [_percent_rows(frame)]
    for n, series in enumerate(coverage.series):
        parts.append(_series_marks(series, xs, frame, _PALETTE[n % len(_PALETTE)]))
    base = frame.top + frame.height
    parts.append(_text(frame.x0, base + 16, _time_label(starts[0], coverage.bucket_s)))
    if not single:
        last = _time_label(starts[-1], coverage.bucket_s)
        parts.append(_text(frame.x0 + frame.width, base + 16, last, "end"))
    legend = [(s.value, _PALETTE[n % len(_PALETTE)]) for n, s in enumerate(coverage.series)]
    parts.append(_legend(legend, base + 40, frame.x0))
    bucket = f"bucket {coverage.bucket_s // 60} min"
    parts.append(_text(_WIDTH - 10, base + 40, bucket, "end", 'fill="#777"'))
    return _svg("plot-coverage-time", title, int(base + 52), "".join(parts))


def _bin_label(low: float, high: float | None) -> str:
    def fmt(ms: float) -> str:
        return f"{ms / 1000:g}s" if ms >= 1000 else f"{ms:g}"

    return f"≥{fmt(low)}" if high is None else f"{fmt(low)}-{fmt(high)}"


def latency_svg(latency: Latency) -> str:
    """Histogram of evaluation elapsed time (ms bins), with P50/P95 in the title line."""
    title = "Evaluation latency (ms)"
    if latency.n == 0:
        return _empty("plot-latency", title, "no evaluations in scope")
    x0, top, plot_h = 50.0, 40.0, 120.0
    bins = latency.histogram
    bar_w = (_WIDTH - x0 - 20) / len(bins)
    peak = max(b.n for b in bins) or 1
    parts = [
        _text(
            x0, 14, f"n = {latency.n}   P50 {latency.p50_ms:.1f} ms   P95 {latency.p95_ms:.1f} ms"
        )
    ]
    for i, b in enumerate(bins):
        h = plot_h * b.n / peak
        x = x0 + i * bar_w
        parts.append(
            _rect(x + 2, top + plot_h - h, bar_w - 4, h, _PALETTE[0], title=f"{b.n} evaluations")
        )
        if b.n:
            parts.append(_text(x + bar_w / 2, top + plot_h - h - 4, str(b.n), "middle"))
        parts.append(
            _text(x + bar_w / 2, top + plot_h + 16, _bin_label(b.low_ms, b.high_ms), "middle")
        )
    parts.append(_line(x0, top + plot_h, _WIDTH - 20, top + plot_h, "#555"))
    return _svg("plot-latency", title, int(top + plot_h + 28), "".join(parts))


def _source_label(c: Calibration) -> str:
    source = "SYNTHETIC" if c.probability_source == "synthetic" else c.probability_source
    ece = "—" if c.ece is None else f"{c.ece:.3f}"
    return f"{c.metric_id} ({c.judge_kind}, {source}) ECE {ece} n={c.n}"


def calibration_svg(gold: GoldReport | None) -> str:
    """Reliability diagram: observed frequency against mean predicted probability per bin."""
    title = "Calibration of the judge's probabilities (reliability diagram)"
    tables = [] if gold is None else [c for c in gold.calibration if c.n]
    if not tables:
        return _empty("plot-calibration", title, "no gold-labelled probabilities in scope")
    x0, top, size = 60.0, 16.0, 260.0
    parts = []
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(_line(x0 + size * tick, top, x0 + size * tick, top + size, "#eee"))
        parts.append(_line(x0, top + size * (1 - tick), x0 + size, top + size * (1 - tick), "#eee"))
        parts.append(_text(x0 + size * tick, top + size + 14, f"{tick:g}", "middle"))
        parts.append(_text(x0 - 6, top + size * (1 - tick) + 4, f"{tick:g}", "end"))
    parts.append(_line(x0, top + size, x0 + size, top, "#999", extra='stroke-dasharray="4 3"'))
    parts.append(_text(x0 + size / 2, top + size + 30, "mean predicted probability", "middle"))
    parts.append(
        _text(16, top + size / 2, "observed frequency", "middle",
              f'transform="rotate(-90 16 {top + size / 2:.1f})"')
    )  # fmt: skip
    for n, c in enumerate(tables):
        parts.append(_curve(c, _PALETTE[n % len(_PALETTE)], x0, top, size))
        ly = top + 14 + n * 18
        parts.append(_rect(x0 + size + 30, ly - 10, 12, 12, _PALETTE[n % len(_PALETTE)]))
        parts.append(_text(x0 + size + 48, ly, _source_label(c)))
    height = max(top + size + 40, top + 20 + len(tables) * 18)
    body = f'<g transform="translate(6 0)">{"".join(parts)}</g>'
    return _svg("plot-calibration", title, int(height), body)


def _curve(c: Calibration, color: str, x0: float, top: float, size: float) -> str:
    points = [
        (x0 + size * b.mean_predicted, top + size * (1 - b.observed), b.n)
        for b in c.bins
        if b.n and b.mean_predicted is not None and b.observed is not None
    ]
    parts = []
    if len(points) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
    for x, y, n in points:
        radius = 3 + min(n, 100) ** 0.5
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{radius:.1f}" fill="{color}" '
                     f'fill-opacity="0.7"><title>{n} results</title></circle>')  # fmt: skip
    return "".join(parts)


# --- sections ----------------------------------------------------------------------------------


def _header(report: EvalReport) -> str:
    scope = report.scope
    filters = [
        f"{name}={value}"
        for name, value in scope.model_dump(mode="json").items()
        if value not in (None, [], ()) and name not in ("scenario_by", "slice_by")
    ]
    banner = ""
    if report.synthetic:
        banner = (
            '<div class="synthetic" id="synthetic-banner">SYNTHETIC JUDGE — these results are '
            "deterministic placeholder answers, not a model's judgment.</div>"
        )
    judges = ", ".join(f"{j.kind} ({j.model or 'default'}): {j.evaluations}" for j in report.judges)
    return (
        f"<h1>evalq report{' — SYNTHETIC' if report.synthetic else ''}</h1>{banner}"
        f'<p class="meta">generated {_e(report.generated_at.isoformat(timespec="seconds"))} · '
        f"store {_e(report.store)} · scope: {_e(', '.join(filters) or 'everything')}<br>"
        f"judges: {_e(judges or 'none in scope')} · metric-set versions: "
        f"{_e(', '.join(f'{k} ({v})' for k, v in report.metric_set_versions.items()) or '—')}</p>"
    )


def _kpis(report: EvalReport) -> str:
    u = report.usage
    usage = f"{u.input_tokens} in / {u.output_tokens} out"
    items = [
        ("snapshots", report.snapshots),
        ("evaluations", report.evaluations),
        ("superseded evaluations", report.superseded_evaluations),
        ("sends (duplicates)", f"{report.sends} ({report.duplicate_sends})"),
        ("open dead letters", report.dead_letters_open),
        ("latency P50 / P95", f"{report.latency.p50_ms:.0f} / {report.latency.p95_ms:.0f} ms"),
        ("tokens" + (" (incomplete)" if u.incomplete else ""), usage),
        ("judge requests", f"{u.requests} ({u.responses_with_usage} with usage)"),
    ]
    cells = "".join(f'<div class="kpi"><b>{_e(v)}</b><span>{_e(k)}</span></div>' for k, v in items)
    return f'<div class="kpis">{cells}</div>'


def _metrics_table(report: EvalReport) -> str:
    head = ["metric", "results", "by status", "pass rate (DECIDED)", "scorable coverage",
            "missing evidence"]  # fmt: skip
    if report.weighted:
        head += ["weighted pass rate", "weighted coverage"]
    rows = []
    for metric_id, m in report.metrics.items():
        by_status = ", ".join(f"{k} {v}" for k, v in m.by_status.items())
        row: list[object] = [metric_id, m.total, by_status, _rate(m.pass_rate), _rate(m.coverage),
                             _rate(m.missing_evidence)]  # fmt: skip
        if report.weighted:
            w = m.weighted
            row += [_weighted(w.pass_rate if w else None), _weighted(w.coverage if w else None)]
        rows.append(row)
    reasons = [
        [metric_id, ", ".join(f"{k} {v}" for k, v in m.by_reason.items())]
        for metric_id, m in report.metrics.items()
    ]
    return _table(head, rows) + _table(["metric", "by reason"], reasons)


def _metrics_heading(report: EvalReport) -> str:
    if report.pooled and len(report.versions) > 1:
        return "Metrics — metric-set versions pooled (--pool-versions)"
    if report.metrics_version is not None and len(report.versions) > 1:
        return f"Metrics — metric-set version {report.metrics_version} (the most recent)"
    return "Metrics"


def _versions_section(report: EvalReport) -> str:
    """Every metric-set version side by side: counted, superseded, each metric's pass rate."""
    if len(report.versions) < 2:
        return ""
    versions = report.versions
    head = ["", *(v.metric_set_version for v in versions)]
    rows: list[list[object]] = [
        ["evaluations counted", *(v.evaluations for v in versions)],
        ["superseded", *(v.superseded for v in versions)],
    ]
    metric_ids = sorted({m for v in versions for m in v.metrics})
    for metric_id in metric_ids:
        cells = [v.metrics.get(metric_id) for v in versions]
        rows.append([metric_id, *(_rate(m.pass_rate) if m else "—" for m in cells)])
    return '<h2 id="versions">Metric-set versions side by side (pass rate, DECIDED)</h2>' + _table(
        head, rows, numeric_from=1
    )


def _gold_section(gold: GoldReport | None) -> str:
    if gold is None:
        return "<h2>Against gold labels</h2><p class='note'>No gold labels in scope.</p>"
    columns = ("total", "labelled", "correct", "incorrect", "inconclusive", "skipped", "errors",
               "unscored")  # fmt: skip
    rows = []
    labelled = {m for m, s in gold.metrics.items() if s.labelled}
    for scenario, summaries in [("(all)", gold.metrics), *gold.scenarios.items()]:
        for metric_id, s in summaries.items():
            if metric_id not in labelled:
                continue
            accuracy = _rate(gold.accuracy[metric_id]) if scenario == "(all)" else _pct(s.accuracy)
            accuracy = accuracy if s.labelled else "—"
            rows.append([scenario, metric_id, *(getattr(s, c) for c in columns), accuracy])
    parts = [
        "<h2>Against gold labels</h2>",
        f"<p class='note'>{gold.labelled_snapshots} labelled snapshots, "
        f"{gold.labelled_evaluations} evaluations; scenario = {_e(gold.scenario_by)}; "
        "accuracy = correct / labelled (errors, abstentions and skips stay in the "
        "denominator); metrics without labels are in the JSON only.</p>",
        _table(["scenario", "metric", *columns, "accuracy"], rows, numeric_from=2),
    ]
    for metric_id, c in gold.confusion.items():
        matrix = [[e, *(c.counts[e][a] for a in c.actual)] for e in c.expected]
        parts.append(f"<p class='note'>Confusion — {_e(metric_id)} (rows expected)</p>")
        parts.append(_table(["expected \\ actual", *c.actual], matrix, numeric_from=1))
    if gold.calibration:
        parts.append(_calibration_table(gold.calibration))
    return "".join(parts)


def _calibration_table(tables: Sequence[Calibration]) -> str:
    rows = []
    for c in tables:
        source = "SYNTHETIC" if c.probability_source == "synthetic" else c.probability_source
        for b in c.bins:
            if b.n:
                ece = "—" if c.ece is None else f"{c.ece:.3f}"
                rows.append([c.metric_id, c.judge_kind, source, c.kind,
                             f"{b.low:.1f}-{b.high:.1f}", b.n, f"{b.mean_predicted:.3f}",
                             f"{b.observed:.3f}", ece])  # fmt: skip
    head = ["metric", "judge", "probabilities", "kind", "bin", "n", "mean predicted",
            "observed", "ECE"]  # fmt: skip
    return "<p class='note'>Reliability table</p>" + _table(head, rows)


def _outcomes_section(view: OutcomeView) -> str:
    if not view.rows:
        return "<h2>Outcome-linked</h2><p class='note'>No outcome linked to these evaluations.</p>"
    rows = [[r.metric_id, r.judgment, r.outcome, r.value, r.n] for r in view.rows]
    return (
        "<h2>Outcome-linked</h2>"
        f"<p class='note'>{view.linked_evaluations} evaluations with {view.linked_outcomes} "
        "linked outcomes; original judgments are shown as recorded (never changed).</p>"
        + _table(["metric", "original judgment", "outcome", "value", "n"], rows, numeric_from=4)
    )


def _sampling_section(view: SamplingView | None) -> str:
    if view is None:
        return ""
    if not view.recorded:
        return "<p class='note'>Sampled out: unknown (no sampling tally recorded).</p>"
    rows = [
        [r.rule, f"{r.rate:g}", r.lane, r.agent_version or "—", r.environment or "—",
         r.tool or "—", r.seen, r.sampled, r.sampled_out]
        for r in view.rows
    ]  # fmt: skip
    head = ["rule", "rate", "lane", "agent_version", "environment", "tool", "seen", "sampled",
            "sampled out"]  # fmt: skip
    return "<h2>Sampling</h2>" + _table(head, rows, numeric_from=6)


def _coverage_table(coverage: SliceCoverage) -> str:
    rows = [[r.value, r.results, _rate(r.coverage)] for r in coverage.rows]
    return _table([coverage.slice_by, "results", "scorable coverage"], rows)


def render_html(report: EvalReport) -> str:
    """The whole page as one string (UTF-8 when written)."""
    body = [
        _header(report),
        _kpis(report),
        '<section id="plots">',
        "<h2>Status mix per metric</h2>",
        status_mix_svg(report.metrics),
        "<h2>Pass rate and scorable coverage</h2>",
        pass_rate_svg(report.metrics),
        "<h2>Coverage by slice over time</h2>",
        coverage_time_svg(report.coverage),
        "<h2>Latency</h2>",
        latency_svg(report.latency),
        "<h2>Calibration</h2>",
        calibration_svg(report.gold),
        "</section>",
        f"<h2>{_e(_metrics_heading(report))}</h2>",
        _metrics_table(report),
        _versions_section(report),
        "<h2>Coverage by slice</h2>",
        _coverage_table(report.coverage),
        _gold_section(report.gold),
        _outcomes_section(report.outcomes),
        _sampling_section(report.sampling),
        "<h2>Notes</h2>",
        *(f"<p class='note'>{_e(n)}</p>" for n in report.notes),
    ]
    if report.synthetic:
        body.append('<div class="synthetic">SYNTHETIC JUDGE — not a model\'s judgment.</div>')
    title = "evalq report" + (" — SYNTHETIC" if report.synthetic else "")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )
