"""Markdown reports of the paper's experiments: one table per result dict.

:func:`to_markdown` writes the report of a result dict of any experiment;
:func:`markdown_table` and :func:`parse_markdown_tables` write and read back the
GitHub-flavoured tables (the tests check the reports through the latter).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from streamspec.experiments.paper_metrics import (
    finite_mean,
    median_ratio_and_wins,
    standard_error,
)
from streamspec.experiments.paper_settings import HEADLINE

__all__ = [
    "markdown_table",
    "parse_markdown_tables",
    "toy_markdown",
    "deterministic_markdown",
    "synthetic_markdown",
    "real_markdown",
    "to_markdown",
]


def _number(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` decimals, in scientific notation when tiny or huge.

    Examples
    --------
    >>> _number(0.12345), _number(1.5e-5), _number(float("inf")), _number(float("nan"))
    ('0.123', '1.50e-05', 'inf', 'n/a')
    """
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "inf"
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e4):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}f}"


def _mean_and_se(values: Sequence[float]) -> str:
    """``"mean ± s.e."``, or how many repetitions overflowed when the mean is infinite."""
    m = finite_mean(values)
    if not math.isfinite(m):
        finite = np.asarray(values, dtype=float)
        bad = int((~np.isfinite(finite)).sum())
        return f"inf ({bad} of {len(values)} overflow)"
    return f"{_number(m)} ± {_number(standard_error(values))}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def parse_markdown_tables(text: str) -> list[list[list[str]]]:
    """Every table of a Markdown text as a list of rows of cells (header first).

    Examples
    --------
    >>> parse_markdown_tables("x\\n\\n| a | b |\\n| --- | --- |\\n| 1 | 2 |\\n")
    [[['a', 'b'], ['1', '2']]]
    """
    tables, cur = [], []
    for line in text.splitlines() + [""]:
        s = line.strip()
        if s.startswith("|") and s.endswith("|"):
            cells = [c.strip() for c in s[1:-1].split("|")]
            if not all(set(c) <= set("-: ") and c for c in cells):
                cur.append(cells)
        elif cur:
            tables.append(cur)
            cur = []
    return tables


def _toy_headline_table(res: dict) -> str:
    """The headline estimators per setting, beside the paper's numbers."""
    lam = res["penalty"]
    cols = [v.name for v in HEADLINE if v.name in res["variants"]]
    head = [res["setting_label"], "rank"] + [
        f"{c} (λ={lam:g})" if c.endswith("L1") else c for c in cols] + [
        "paper θ_spec", "paper θ_M", "paper θ_M + L1"]
    rows = []
    for s in res["settings"]:
        e = res["errors"][s]
        paper = res["paper"].get(s) or res["paper"].get(str(_setting_value(s))) or ("", "", "")
        rows.append([s, res["ranks"][s]] + [_mean_and_se(e[c]) if c in e else "-" for c in cols]
                    + [str(p) for p in paper])
    return markdown_table(head, rows)


def _toy_variants_table(res: dict) -> str:
    """Every variant per setting: mean ± s.e., median ratio to θ_spec, share of wins."""
    vhead = ["variant"] + [f"{res['setting_label']} {s}" for s in res["settings"]]
    vrows = []
    for v in res["variants"]:
        r = [v]
        for s in res["settings"]:
            e = res["errors"][s]
            if v not in e:
                r.append("skipped")
                continue
            ratio, wins = median_ratio_and_wins(e, v)
            r.append(f"{_mean_and_se(e[v])}; ×{_number(ratio, 2)}, {100 * wins:.0f}%")
        vrows.append(r)
    return markdown_table(vhead, vrows)


def _toy_times_table(res: dict) -> str:
    """Mean fit time of every variant per setting."""
    trow = [[v] + [_number(float(np.mean(res["times"][s][v])), 3) if v in res["times"][s]
                   else "-" for s in res["settings"]] for v in res["variants"]]
    return markdown_table(["variant"] + res["settings"], trow)


def toy_markdown(res: dict) -> str:
    """Headline table (ours beside the paper's) and the variants table of a toy result."""
    name = res["experiment"]
    out = [f"### {name}: relative joint-probability error (mean ± s.e., {res['reps']} reps, "
           f"{res['n_train']:,} training examples)", "", _toy_headline_table(res), "",
           "θ_M: factorization 'shared' (one learned S; the default until 735d93a); θ_M fixed: "
           "S = U fixed (the default since). Same "
           "weighting (exact, shrinkage 'auto') for both.", ""]
    out += [f"Variants of θ_M ({name}): mean ± s.e.; ×median ratio to θ_spec; % of repetitions "
            "with a lower error than θ_spec.", "", _toy_variants_table(res), ""]
    out += [f"Mean fit time per repetition, seconds ({name}).", "", _toy_times_table(res), ""]
    return "\n".join(out)


def _setting_value(s: str) -> int | float:
    """A setting's number back from its string key (``"3"`` -> 3, ``"0.1"`` -> 0.1)."""
    try:
        return int(s)
    except ValueError:
        return float(s)


def deterministic_markdown(res: dict) -> str:
    """B_0 of every estimator per sequence length, beside the paper's."""
    head = ["Length", "triples"] + [f"B_0 {v}" for v in res["variants"]] + [
        "paper B_0 spec", "paper B_0 M"]
    rows = []
    for r in res["rows"]:
        paper = res["paper"].get(str(r["length"]), ("", ""))
        rows.append([r["length"], int(r["n_triples"])] + [_number(r[v], 4) for v in res["variants"]]
                    + [str(p) for p in paper])
    return "\n".join(["### deterministic: B_0 (its trace; rank 1) on 0^10 1^(L-10)", "",
                      markdown_table(head, rows), ""])


def synthetic_markdown(res: dict) -> str:
    """One learning-curve table per synthetic HMM: error per training size and estimator."""
    out = []
    for label, c in res["curves"].items():
        head = ["training examples"] + res["variants"]
        rows = []
        for s in c["errors"]:
            e = c["errors"][s]
            cells = [_mean_and_se(e[v]) + ("" if v == "θ_spec" else
                                  f"; ×{_number(median_ratio_and_wins(e, v)[0], 2)}, "
                                  f"{100 * median_ratio_and_wins(e, v)[1]:.0f}%")
                     for v in res["variants"]]
            rows.append([s] + cells)
        out += [f"### synthetic {label} (rank {c['ranks'][str(res['sizes'][0])]}): relative "
                f"joint-probability error, mean ± s.e. over {res['reps']} reps; ×median ratio "
                "to θ_spec, % of reps better than θ_spec", "", markdown_table(head, rows), ""]
    return "\n".join(out)


def _real_sizes_table(res: dict) -> str:
    """Symbols, rank and split sizes of every data set."""
    head = ["data set", "n", "rank", "train symbols", "test symbols"]
    rows = []
    for name, r in res["rows"].items():
        rows.append([name, r["n_symbols"], r["rank"], f"{r['n_train']:,}", f"{r['n_test']:,}"])
    return markdown_table(head, rows)


def _real_errors_table(res: dict) -> str:
    """Predictive test error of the headline methods, beside the paper's (Ecoli included)."""
    cols = ("θ_spec", "θ_M", "θ_M + L1", "θ_M fixed", "θ_M fixed + L1", "EM")
    head = ["data set"] + [f"{v} error" for v in cols] + [
        "paper θ_spec", "paper θ_M", "paper θ_M + L1", "paper EM"]
    rows = []
    for name in list(res["rows"]) + ["ecoli"]:
        paper = [str(p) for p in res["paper"].get(name, ["", "", "", ""])]
        if name not in res["rows"]:
            rows.append([name, "not sequence data"] + ["-"] * (len(cols) - 1) + paper)
            continue
        ms = res["rows"][name]["methods"]
        rows.append([name] + [_number(1 - ms[v]["accuracy"]) if v in ms else "n/a"
                              for v in cols] + paper)
    return markdown_table(head, rows)


def _real_methods_table(res: dict) -> str:
    """Error, log loss and fit seconds of every method on every data set."""
    head = ["method"] + [f"{s} err / logloss / s" for s in res["rows"]]
    rows = []
    for v in res["variants"]:
        r = [v]
        for s in res["rows"]:
            m = res["rows"][s]["methods"].get(v)
            r.append("n/a" if m is None else
                     f"{_number(1 - m['accuracy'])} / {_number(m['log_loss'])} / "
                     f"{_number(m['seconds'], 2)}")
        rows.append(r)
    return markdown_table(head, rows)


def real_markdown(res: dict) -> str:
    """Data set sizes, errors beside the paper's, every method's scores, and the notes."""
    out = [f"### real data: next-symbol error (1 - accuracy) | log loss per symbol (nats) | "
           f"fit seconds; λ = {res['penalty']:g}; EM: best of {res['em_restarts']} restarts, "
           f"at most {res['em_iter']} iterations", ""]
    out += [_real_sizes_table(res), ""]
    out += ["Predictive test error (1 - next-symbol accuracy), ours beside the paper's.", "",
            _real_errors_table(res), ""]
    out += ["All methods: error / log loss / fit seconds.", "", _real_methods_table(res), ""]
    out += [f"- {note}" for note in res["notes"]] + [""]
    return "\n".join(out)


def to_markdown(res: dict) -> str:
    """The Markdown report of one result dict."""
    kind = res["experiment"]
    if kind == "deterministic":
        return deterministic_markdown(res)
    if kind == "synthetic":
        return synthetic_markdown(res)
    if kind == "real":
        return real_markdown(res)
    return toy_markdown(res)
