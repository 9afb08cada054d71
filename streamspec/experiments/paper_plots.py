"""Figures of the paper's experiments (PNG, with matplotlib's Agg backend).

matplotlib is optional and imported only when a plot is drawn; the callers check
that it is installed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from streamspec.experiments.paper_metrics import finite_mean, standard_error
from streamspec.experiments.paper_settings import HEADLINE

__all__ = ["plot_deterministic", "plot_synthetic", "plot_toy"]

#: colours of the estimators drawn in the synthetic learning curves
SYNTHETIC_COLORS = {"θ_spec": "tab:green", "θ_M": "tab:blue", "θ_M fixed": "tab:purple",
                    "W=per_symbol, fixed": "tab:orange"}


def _pyplot():
    """``matplotlib.pyplot`` on the Agg backend (files only: no display is needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, dpi: int) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    _pyplot().close(fig)


# ---------------------------------------------------------------------------
# Deterministic sequence
# ---------------------------------------------------------------------------


def _plot_b0_decay(ax, res: dict) -> None:
    Ls = [r["length"] for r in res["rows"]]
    for v, marker in zip(res["variants"], "osd^vx", strict=False):
        ax.semilogy(Ls, [max(abs(r[v]), 1e-12) for r in res["rows"]], marker=marker, label=v)
    ax.set_xlabel("sequence length L")
    ax.set_ylabel("|B_0| (trace, rank 1)")
    ax.set_title("Decay of B_0")
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.22))


def _plot_weighting_heatmap(fig, ax, W: np.ndarray, length) -> None:
    im = ax.imshow(np.log10(np.abs(W) + 1e-12), cmap="viridis")
    ax.set_title(f"log10 |W| for B_0, L={length}")
    ax.set_xlabel("moment (x1, x3)")
    ax.set_ylabel("moment (x1, x3)")
    labels = [f"{j}{i}" for j in range(2) for i in range(2)]
    ax.set_xticks(range(4), labels)
    ax.set_yticks(range(4), labels)
    fig.colorbar(im, ax=ax, fraction=0.046)


def plot_deterministic(res: dict, path: Path) -> None:
    """B_0 against the sequence length (left) and θ_M's weighting of B_0's moments (right)."""
    plt = _pyplot()
    lengths = sorted(res["heatmaps"], key=int)
    fig, axes = plt.subplots(1, len(lengths) + 1, figsize=(3.0 * (len(lengths) + 1), 4.2))
    _plot_b0_decay(axes[0], res)
    for ax, L in zip(axes[1:], lengths, strict=True):
        _plot_weighting_heatmap(fig, ax, np.asarray(res["heatmaps"][L]), L)
    fig.suptitle("Deterministic sequence 0^10 1^(L-10): B_0 of θ_spec and θ_M (left); "
                 "θ_M's weighting (exact, unshrunk) on the moments of B_0 (right)")
    _save(fig, path, dpi=90)


# ---------------------------------------------------------------------------
# Synthetic learning curves
# ---------------------------------------------------------------------------


def _plot_curve(ax, bx, curve: dict, variants: list[str]) -> list[int]:
    """Draw one HMM's curves (``ax``) and ratios to θ_spec (``bx``); return the sizes."""
    sizes = sorted(int(s) for s in curve["errors"])
    spec = [np.asarray(curve["errors"][str(s)]["θ_spec"], dtype=float) for s in sizes]
    for v in variants:
        color = SYNTHETIC_COLORS.get(v)
        vals = [np.asarray(curve["errors"][str(s)][v], dtype=float) for s in sizes]
        mean = np.array([finite_mean(x) for x in vals])
        wild = (not np.isfinite(mean).all()) or (mean > 100 * np.array(
            [finite_mean(x) for x in spec])).any()
        if wild:
            ax.plot(sizes, [np.median(x) for x in vals], ls=":", marker="x",
                    color=color, label=f"{v} (median only; mean explodes)")
        else:
            se = [standard_error(x) for x in vals]
            ax.errorbar(sizes, mean, yerr=se, marker="o", capsize=3, label=v,
                        color=color, lw=2 if v == "θ_spec" else 1.3)
        if v != "θ_spec" and not wild:
            with np.errstate(all="ignore"):
                ratio = [float(np.median(x / y)) for x, y in zip(vals, spec, strict=True)]
            bx.plot(sizes, ratio, marker="o", color=color, label=v)
    return sizes


def _style_curve_axes(ax, bx, title: str) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("training examples (one triple each)")
    ax.set_ylabel("relative joint-probability error")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    bx.axhline(1.0, color="tab:green", lw=1)
    bx.set_xscale("log")
    bx.set_xlabel("training examples (one triple each)")
    bx.set_ylabel("median error ratio to θ_spec")
    bx.set_title("below 1: better than θ_spec")
    bx.grid(True, which="both", alpha=0.3)
    bx.legend(fontsize=8)


def plot_synthetic(res: dict, path: Path) -> None:
    """Learning curves (top, mean ± s.e.) and median error ratio to θ_spec (bottom).

    An estimator whose mean is not finite or more than 100 times θ_spec's (the
    shared factorization) is drawn by its median only, dotted, so that the others
    stay readable.
    """
    plt = _pyplot()
    curves = res["curves"]
    fig, axes = plt.subplots(2, len(curves), figsize=(5.8 * len(curves), 7.0), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    for col, (label, c) in enumerate(curves.items()):
        ax, bx = axes[0, col], axes[1, col]
        sizes = _plot_curve(ax, bx, c, res["variants"])
        _style_curve_axes(ax, bx, f"Synthetic HMM {label}, rank {c['ranks'][str(sizes[0])]}: "
                                  f"mean ± s.e., {res['reps']} reps")
    _save(fig, path, dpi=85)


# ---------------------------------------------------------------------------
# Ring, grid, chain
# ---------------------------------------------------------------------------


def plot_toy(res: dict, path: Path) -> None:
    """Median error per setting for the headline estimators, interquartile bars, log scale."""
    plt = _pyplot()
    names = [v.name for v in HEADLINE if v.name in res["variants"]]
    colors = ("tab:green", "tab:blue", "tab:cyan", "tab:purple", "tab:red")
    settings = res["settings"]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / len(names)
    for i, v in enumerate(names):
        x = np.arange(len(settings)) + (i - (len(names) - 1) / 2) * width
        stats = []
        for s in settings:
            e = np.asarray(res["errors"][s].get(v, [np.nan]), dtype=float)
            e = np.where(np.isfinite(e), e, 1e30)
            stats.append(np.percentile(e, [25, 50, 75]))
        q = np.array(stats)
        ax.errorbar(x, q[:, 1], yerr=[q[:, 1] - q[:, 0], q[:, 2] - q[:, 1]], fmt="o",
                    capsize=3, color=colors[i % len(colors)], label=v)
    ax.set_yscale("log")
    ax.set_xticks(range(len(settings)), settings)
    ax.set_xlabel(res["setting_label"])
    ax.set_ylabel("relative joint-probability error")
    ax.set_title(f"{res['experiment']}: {res['n_train']:,} training examples;\n"
                 f"median and interquartile range over {res['reps']} reps", fontsize=10)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path, dpi=90)
