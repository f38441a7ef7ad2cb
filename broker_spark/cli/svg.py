"""An SVG picture of a network of endpoints, written by hand.

Endpoints sit on a circle, the inspected node at the top and the others in
order of distance from it, so a chain reads clockwise; links are straight
lines drawn underneath. Each endpoint is labelled with its short id, and its
full id and subscriptions show as a tooltip. Plain SVG 1.1, no scripts, no
dependencies: any browser opens it. Elements carry classes (``node``,
``link``, ``label``) so tools and tests can pick them out.

It draws what it is given: anything with the attributes of :class:`Drawable`
(``topology`` passes its :class:`~broker_spark.cli.network.Network`). It does
not import :mod:`~broker_spark.cli.network`, which imports it to draw.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Protocol
from xml.sax.saxutils import escape, quoteattr

from broker_spark.cli.node_ids import short

__all__ = ["Drawable", "render_svg"]

NODE_RADIUS = 32
MARGIN = 70


class Drawable(Protocol):
    """What :func:`render_svg` reads of a network, and nothing more (all ids are node ids)."""

    @property
    def node(self) -> str:
        """The inspected node, drawn at the top."""

    @property
    def address(self) -> str:
        """Where the node was reached, for the caption."""

    @property
    def filters(self) -> Mapping[str, Sequence[str]]:
        """Every endpoint (the node included) and its subscriptions."""

    @property
    def routes(self) -> Mapping[str, Sequence[str]]:
        """The node's path to each other endpoint; its length orders them round the circle."""

    @property
    def links(self) -> Collection[tuple[str, str]]:
        """Undirected links, each a sorted pair of ids."""


def _layout(net: Drawable) -> dict[str, tuple[float, float, float]]:
    """Position of every endpoint: ``(x, y)`` on a circle, plus the circle's radius."""
    order = [net.node] + sorted(
        (n for n in net.filters if n != net.node), key=lambda n: (len(net.routes.get(n, ())), n)
    )
    count = len(order)
    radius = 0.0 if count == 1 else max(110.0, count * (NODE_RADIUS * 2 + 24) / (2 * math.pi))
    center = radius + MARGIN
    out = {}
    for i, node in enumerate(order):
        angle = -math.pi / 2 + 2 * math.pi * i / count
        out[node] = (center + radius * math.cos(angle), center + radius * math.sin(angle), radius)
    return out


def render_svg(net: Drawable) -> str:
    """The SVG document (text) for ``net``."""
    pos = _layout(net)
    radius = next(iter(pos.values()))[2]
    size = round(2 * (radius + MARGIN))
    title = (
        f"{len(net.filters)} endpoint(s), {len(net.links)} link(s), "
        f"seen from {short(net.node)} at {net.address}"
    )
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{size}" '
        f'height="{size + 30}" viewBox="0 0 {size} {size + 30}" '
        'font-family="sans-serif" font-size="12">',
        f"<title>broker-spark network: {escape(title)}</title>",
        f'<rect width="{size}" height="{size + 30}" fill="white"/>',
        f'<text class="caption" x="{size / 2:.1f}" y="{size + 18}" text-anchor="middle" '
        f'fill="#555">{escape(title)}</text>',
        '<g stroke="#7a8691" stroke-width="2">',
    ]
    for a, b in sorted(net.links):
        if a in pos and b in pos:
            (x1, y1, _), (x2, y2, _) = pos[a], pos[b]
            parts.append(
                f'<line class="link" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"/>'
            )
    parts.append("</g>")
    for node, (x, y, _) in pos.items():
        subs = ", ".join(net.filters.get(node, [])) or "no subscriptions"
        fill = "#f4a259" if node == net.node else "#8ecae6"
        parts += [
            f'<g class="endpoint" id={quoteattr("n-" + node)}>',
            f"<title>{escape(node)}: {escape(subs)}</title>",
            f'<circle class="node" cx="{x:.1f}" cy="{y:.1f}" r="{NODE_RADIUS}" '
            f'fill="{fill}" stroke="#33414e" stroke-width="1.5"/>',
            f'<text class="label" x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle">'
            f"{escape(short(node))}</text>",
            "</g>",
        ]
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
