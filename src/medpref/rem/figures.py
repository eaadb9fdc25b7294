"""Figures of stage 03: the flowchart as a graph and a REM confusion matrix.

Drawn with networkx + matplotlib only (no graphviz binary needed): goal rules in a row in
their precedence order, constraint rules below them, solid arrows for r' ≺ r
(predecessor) and dashed ones for r' → r (constrains).
"""

from __future__ import annotations

import pandas as pd

from medpref.rules import Flowchart


def goal_order(flowchart: Flowchart) -> list[str]:
    """Goal ids in a topological order of their predecessors (file order among equals)."""
    done: list[str] = []
    pending = [g.id for g in flowchart.goals]
    while pending:
        ready = [g for g in pending if all(p in done for p in flowchart[g].predecessors)]
        done += ready
        pending = [g for g in pending if g not in ready]
    return done


def flowchart_layout(flowchart: Flowchart) -> dict[str, tuple[float, float]]:
    """Positions: goals at y=1 left to right, constraints at y=0 spread under them."""
    goals = goal_order(flowchart)
    pos = {g: (float(i), 1.0) for i, g in enumerate(goals)}
    cons = [c.id for c in flowchart.constraints]
    width = max(len(goals) - 1, 1)
    for i, c in enumerate(cons):
        pos[c] = (width * (i + 0.5) / len(cons) if len(cons) > 1 else width / 2, 0.0)
    return pos


def draw_flowchart(flowchart: Flowchart, title: str = "Diagnostic flowchart as rules"):
    import networkx as nx

    from medpref.reports import figure

    graph = nx.DiGraph()
    for r in flowchart.rules:
        graph.add_node(r.id, kind=r.kind)
    for src, dst, kind in flowchart.edges():
        graph.add_edge(src, dst, kind=kind)
    pos = flowchart_layout(flowchart)
    fig, ax = figure(figsize=(8, 4.2))
    for kind, color, shape in (("goal", "#7fb3e6", "s"), ("constraint", "#c9c9c9", "o")):
        nodes = [n for n, d in graph.nodes(data=True) if d["kind"] == kind]
        nx.draw_networkx_nodes(graph, pos, nodelist=nodes, node_color=color,
                               node_shape=shape, node_size=1500, ax=ax, label=kind)
    labels = {r.id: f"{r.id}\n{r.name}" for r in flowchart.rules}
    nx.draw_networkx_labels(graph, pos, labels=labels, font_size=7, ax=ax)
    for kind, style, color in (("precedes", "solid", "#1f4e79"), ("constrains", "dashed",
                                                                   "#777777")):
        edges = [(u, v) for u, v, d in graph.edges(data=True) if d["kind"] == kind]
        nx.draw_networkx_edges(graph, pos, edgelist=edges, style=style, edge_color=color,
                               arrows=True, arrowsize=14, node_size=1500,
                               connectionstyle="arc3,rad=0.08", ax=ax)
    ax.plot([], [], color="#1f4e79", label="precedes (r' ≺ r)")
    ax.plot([], [], color="#777777", linestyle="dashed", label="constrains (r' → r)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, markerscale=0.4)
    ax.set_title(title)
    ax.axis("off")
    ax.margins(0.15)
    return fig


def plot_confusions(tables: dict[str, pd.DataFrame], title: str = "REM confusion (test)"):
    """One heat map per scorer: gold rows × predicted columns (incl. 'none')."""
    from medpref.reports import figure

    fig, axes = figure(1, len(tables), figsize=(3.6 * len(tables), 3.4), squeeze=False)
    for ax, (name, table) in zip(axes[0], tables.items()):
        ax.imshow(table.values, cmap="Blues")
        ax.set_xticks(range(table.shape[1]), [str(c) for c in table.columns])
        ax.set_yticks(range(table.shape[0]), [str(i) for i in table.index])
        top = max(int(table.values.max()), 1)
        for (i, j), v in pd.DataFrame(table.values).stack().items():
            ax.text(j, i, int(v), ha="center", va="center", fontsize=9,
                    color="white" if v > top / 2 else "black")
        ax.set_xlabel("predicted")
        ax.set_ylabel("gold")
        ax.set_title(name)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
