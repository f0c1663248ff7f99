"""A picture of a session's placement: the graph drawn by Graphviz, one colour per provider.

Nodes are filled with their provider's colour; fused groups are outlined as Graphviz clusters;
control-flow bodies are clusters of their own; an edge whose value the plan copies between
memories is drawn dashed red and labelled with the copy; every node's tooltip (shown on hover
in the HTML page) gives its op, provider, group and each earlier provider's reason for
declining it. Graphviz lays out and renders the SVG (the `graphviz` Python package drives the
`dot` program): no layout is done here.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .errors import Fail

if TYPE_CHECKING:
    import graphviz

    from .graph.view import GraphView
    from .partition import NodePlacement, Placement
    from .session import InferenceSession

# colour-blind-safe palette (Okabe-Ito), in provider priority order; CPU is always grey
PALETTE = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
CPU_COLOUR = "#BBBBBB"
COPY_COLOUR = "#D62728"


def provider_colours(providers: Iterable[str]) -> dict[str, str]:
    colours: dict[str, str] = {}
    others = iter(PALETTE)
    for name in providers:
        colours[name] = CPU_COLOUR if name == "CPUExecutionProvider" else next(others, "#999999")
    return colours


def _tooltip(p: NodePlacement) -> str:
    lines = [f"{p.name}: {p.domain + '::' if p.domain else ''}{p.op_type} (opset {p.opset})",
             f"runs on {p.provider}"]
    if p.group is not None:
        lines.append(f"fused group {p.group}")
    if p.note:
        lines.append(p.note)
    lines += [f"{provider} declined: {reason}" for provider, reason in p.declined.items()]
    return "\n".join(lines)


def placement_graph(graph: GraphView, placement: Placement) -> graphviz.Digraph:
    """The placement of ``graph`` (and its control-flow bodies) as a Graphviz digraph."""
    try:
        import graphviz
    except ImportError as e:
        raise Fail("drawing a placement needs the graphviz package: pip install 'ort-core[viz]'") from e
    colours = provider_colours(placement.providers)
    by_node = {(p.graph, p.name): p for p in placement.nodes}
    copies = {(c.graph, c.value): c for c in placement.copies}
    dot = graphviz.Digraph("placement", graph_attr={"rankdir": "TB", "fontname": "Helvetica", "tooltip": " "},
                           node_attr={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica",
                                      "fontsize": "10"},
                           edge_attr={"fontname": "Helvetica", "fontsize": "8", "color": "#555555"})
    _draw(dot, graph, by_node, copies, colours)
    with dot.subgraph(name="cluster_legend") as legend:
        legend.attr(label="providers", style="rounded", color="#888888")
        for name in placement.providers:
            legend.node(f"legend_{len(name)}_{abs(hash(name))}", name, fillcolor=colours[name], shape="box", tooltip=name)
    return dot


def _node_id(graph: GraphView, index: int) -> str:
    # graphviz's edge() reads ':' as a port separator: ids use neither ':' nor the path's '/'
    return "n_" + "".join(c if c.isalnum() else "_" for c in graph.path) + f"_{index}"


def _draw(dot, graph: GraphView, by_node, copies, colours) -> None:
    producer: dict[str, str] = {}
    groups: dict[int, list[tuple[str, dict]]] = {}
    for node in graph.nodes:
        placed = by_node.get((graph.path, node.name))
        attrs = {"label": f"{node.op_type}\n{node.name}", "id": f"node::{graph.path}::{node.name}"}
        if placed is not None:
            attrs.update(fillcolor=colours.get(placed.provider, "#FFFFFF"), tooltip=_tooltip(placed))
        else:
            attrs.update(fillcolor="#FFFFFF", tooltip=f"{node.name}: not placed")
        node_id = _node_id(graph, node.index)
        if placed is not None and placed.group is not None:
            groups.setdefault(placed.group, []).append((node_id, attrs))
        else:
            dot.node(node_id, **attrs)
        for out in node.outputs:
            if out:
                producer[out] = node_id
        for attribute, body in node.subgraphs.items():
            with dot.subgraph(name=f"cluster_body::{body.path}") as sub:
                sub.attr(label=f"{node.name}.{attribute}", style="dashed", color="#777777", tooltip=body.path)
                _draw(sub, body, by_node, copies, colours)
    for group, members in groups.items():
        with dot.subgraph(name=f"cluster_group::{graph.path}::{group}") as sub:
            sub.attr(label=f"fused group {group}", style="bold,rounded", color="#222222", penwidth="2",
                     tooltip=f"fused group {group}")
            for node_id, attrs in members:
                sub.node(node_id, **attrs)
    for node in graph.nodes:
        for name in node.inputs:
            source = producer.get(name)
            if not source:
                continue
            copy = copies.get((graph.path, name))
            if copy is not None:
                dot.edge(source, _node_id(graph, node.index), label=f"copy {copy.source} \u2192 {copy.target}",
                         color=COPY_COLOUR, fontcolor=COPY_COLOUR, style="dashed", penwidth="2",
                         tooltip=f"{name}: copied {copy.source} \u2192 {copy.target}")
            else:
                dot.edge(source, _node_id(graph, node.index), tooltip=name)


def placement_html(session: InferenceSession, title: str = "placement") -> str:
    """A standalone HTML page with the session's placement drawn as SVG (hover for reasons)."""
    placement = session.get_placement()
    dot = placement_graph(session._graph, placement)
    try:
        svg = dot.pipe(format="svg").decode()
    except Exception as e:  # graphviz.ExecutableNotFound, CalledProcessError
        raise Fail(f"Graphviz could not render the placement ({e}); install Graphviz's dot program "
                   "(apt-get install graphviz, brew install graphviz)") from e
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and doctype: inline SVG in HTML
    counts = placement.counts(None)
    total = sum(counts.values())
    summary = ", ".join(f"{html.escape(p)} {counts[p]}/{total}" for p in placement.providers if counts.get(p))
    copies = len(placement.copies)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:Helvetica,Arial,sans-serif;margin:16px} svg{max-width:100%;height:auto}</style>"
        "</head><body>"
        f"<h2>{html.escape(title)}</h2><p id='summary'>{summary}; {copies} device cop{'y' if copies == 1 else 'ies'}. "
        "Hover a node for its provider and the reasons of the providers that declined it.</p>"
        f"<div id='graph' data-nodes='{len(placement.nodes)}'>{svg}</div>"
        # after layout, count the graph's nodes the browser drew with a non-empty box (checked
        # by the tests in headless Chromium, and a quick sanity check for a person)
        "<script>window.addEventListener('load',()=>{const g=document.querySelectorAll("
        "'#graph g.node[id^=\"node::\"]');let n=0;g.forEach(e=>{const b=e.getBBox();"
        "if(b.width>0&&b.height>0)n++;});document.body.dataset.drawn=n;});</script>"
        "</body></html>\n"
    )
