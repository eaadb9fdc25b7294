"""One figure style, no negative zeros, and the figure fixes (radar, Elo title, heatmap)."""

from __future__ import annotations

import math

import matplotlib
import pandas as pd
import pytest

from medpref import reports

matplotlib.use("Agg")


@pytest.mark.parametrize("value,fmt,text", [(-0.3, ".0f", "0"), (-0.004, ".2f", "0.00"),
                                            (-1.2, ".0f", "-1"), (0.0, ".1f", "0.0"),
                                            (-0.0, ".0f", "0"), (math.nan, ".0f", "")])
def test_format_number_never_writes_negative_zero(value, fmt, text):
    assert reports.format_number(value, fmt) == text


def test_write_table_has_no_negative_zero(tmp_path):
    df = pd.DataFrame({"metric": ["a", "b", "c"], "rho": [-0.0, -0.0004, -12.0]})
    paths = reports.write_table(df, tmp_path / "t", floatfmt=".1f")
    csv, md = paths["csv"].read_text(), paths["md"].read_text()
    assert "-0.0\n" not in csv and "-0.0004" in csv and "-12.0" in csv  # CSV keeps precision
    assert "-0.0" not in md and "-12.0" in md


def test_figure_applies_the_one_style():
    import matplotlib.pyplot as plt

    plt.rcdefaults()
    fig, ax = reports.figure()
    assert plt.rcParams["axes.titleweight"] == "bold"
    assert not plt.rcParams["axes.spines.top"]
    plt.close(fig)


def _overlap(a, b) -> bool:
    return not (a.x1 <= b.x0 or b.x1 <= a.x0 or a.y1 <= b.y0 or b.y1 <= a.y0)


def test_radar_title_clear_of_the_legend():
    from medpref.remscore.compliance import radar_plot

    table = pd.DataFrame({"rule": list("ABCDEF"), "name": ["long rule name"] * 6,
                          "mean": [1.0, 1.5, 0.5, 2.0, 1.2, 0.8]})
    fig = radar_plot({"embedded dialogues (expected)": table,  # as stage 03 draws it
                      "embedded dialogues (finetuned)": table.assign(mean=1.0)},
                     title="Rule compliance, 3 embedded dialogues")
    fig.canvas.draw()
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    title = ax.title.get_window_extent(renderer)
    legend = ax.get_legend().get_window_extent(renderer)
    assert ax.get_title() and not _overlap(title, legend)
    for label in ax.get_xticklabels():
        assert not _overlap(title, label.get_window_extent(renderer)), label.get_text()


def test_elo_plot_is_titled():
    from medpref.medqa.plots import rating_intervals

    table = pd.DataFrame({"verdicts": ["stage", "stage"], "model": ["a", "b"],
                          "elo": [1010.0, 990.0], "elo_low": [1000.0, 980.0],
                          "elo_high": [1020.0, 1000.0], "bt": [1005.0, 995.0],
                          "bt_low": [995.0, 985.0], "bt_high": [1015.0, 1005.0]})
    assert "Elo" in rating_intervals(table).axes[0].get_title()
    assert "Elo" in rating_intervals(table.iloc[0:0]).axes[0].get_title()


def test_heatmap_annotations_have_no_negative_zero():
    from medpref.imap.correlation import plot_heatmap

    long = pd.DataFrame({"metric": ["m1", "m1", "m2", "m2"], "system": ["s"] * 4,
                         "dim": ["acc", "cmp", "acc", "cmp"],
                         "rho": [-0.004, 0.5, -0.3, -0.0]})
    fig = plot_heatmap(long, ["m1", "m2"], "t")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts and not any(t.startswith("-0") for t in texts), texts
    assert "-30" in texts and "50" in texts
