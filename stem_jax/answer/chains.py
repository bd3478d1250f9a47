"""DFS linearisation of an evidence subgraph into reasoning chains (paper §3.6), for an LLM."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Triple = tuple[str, str, str]


def reasoning_chains(evidence: Iterable[Triple], roots: Sequence[str], max_chains: int = 64) -> list[str]:
    """Root-to-leaf paths of a depth-first walk over ``evidence`` from each root.

    Edges are walked undirected; a reversed edge is written ``<-relation-`` so the text keeps the
    KG's direction: ``Kismet -directed_by-> William Dieterle <-directed_by- Dieterle Film``.
    """
    adjacency: dict[str, list[tuple[str, str, bool]]] = {}
    for head, relation, tail in sorted(set(evidence)):
        adjacency.setdefault(head, []).append((relation, tail, True))
        if tail != head:
            adjacency.setdefault(tail, []).append((relation, head, False))
    chains: list[str] = []
    for root in roots:
        stack: list[tuple[str, str, frozenset[str]]] = [(root, root, frozenset([root]))]
        while stack and len(chains) < max_chains:
            node, text, seen = stack.pop()
            steps = [(r, nxt, fwd) for r, nxt, fwd in adjacency.get(node, []) if nxt not in seen]
            if not steps:
                if text != root:
                    chains.append(text)
                continue
            for relation, nxt, forward in reversed(steps):
                arrow = f" -{relation}-> " if forward else f" <-{relation}- "
                stack.append((nxt, text + arrow + nxt, seen | {nxt}))
    return chains
