"""Evidence subgraphs as readable chains: ``A -r-> B <-r2- C``.

Two linearisations:

* :func:`answer_chains` (what ``ask``, the API's ``Answer.chains`` and the server show): for each
  answer, best-ranked first, the shortest walks through the evidence from a topic entity to that
  answer. Every chain ends at an answer, so each one is a reason for an answer the user sees.
* :func:`reasoning_chains` (paper §3.6, the LLM answer-generation prompt P3): root-to-leaf paths of
  a depth-first walk over the whole evidence, answers unknown.

Edges are walked undirected; a reversed edge is written ``<-relation-`` so the text keeps the KG's
direction: ``Kismet -directed_by-> William Dieterle <-directed_by- Dieterle Film``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

Triple = tuple[str, str, str]
Step = tuple[str, str, bool]  # (neighbour, relation, walked head -> tail)


def _adjacency(evidence: Iterable[Triple]) -> dict[str, list[Step]]:
    adjacency: dict[str, list[Step]] = {}
    for head, relation, tail in sorted(set(evidence)):
        adjacency.setdefault(head, []).append((tail, relation, True))
        if tail != head:
            adjacency.setdefault(tail, []).append((head, relation, False))
    return adjacency


def _arrow(relation: str, forward: bool) -> str:
    return f" -{relation}-> " if forward else f" <-{relation}- "


def answer_chains(evidence: Iterable[Triple], roots: Sequence[str], answers: Sequence[str], *, per_answer: int = 3,
                  max_chains: int = 64, display: Callable[[str], str] | None = None) -> list[str]:
    """Chains that support ``answers``: for each answer in the given (ranked) order, up to ``per_answer``
    shortest walks through ``evidence`` from any of ``roots`` to it, in text order; at most ``max_chains``.

    The chains of the best-ranked answers come first, so the first k chains end at answers among the
    first k. An answer that no evidence walk reaches from a root (or that is a root) gets no chain.
    A breadth-first search from all roots at once stops at the layer where the last wanted answer
    is reached, so the cost is bounded by the evidence within that distance. ``display`` maps node
    ids to the names written in the text (default: the ids).
    """
    if per_answer < 1 or max_chains < 1:
        return []
    adjacency = _adjacency(evidence)
    name = display or (lambda node: node)
    wanted = [a for a in dict.fromkeys(answers) if a in adjacency][:max_chains]
    sources = [r for r in dict.fromkeys(roots) if r in adjacency]
    distance = {r: 0 for r in sources}
    parents: dict[str, list[Step]] = {}  # node -> its predecessors one layer closer to a root
    layer, missing = sources, set(wanted) - set(sources)
    while layer and missing:
        reached: list[str] = []
        for node in layer:
            for neighbour, relation, forward in adjacency[node]:
                if neighbour not in distance:
                    distance[neighbour] = distance[node] + 1
                    reached.append(neighbour)
                if distance[neighbour] == distance[node] + 1:
                    parents.setdefault(neighbour, []).append((node, relation, forward))
        missing.difference_update(reached)
        layer = reached

    def walks(node: str) -> Iterator[str]:
        """Shortest walks from a root to ``node`` as text, in a deterministic order."""
        if distance[node] == 0:
            yield name(node)
            return
        for previous, relation, forward in sorted(parents[node], key=lambda s: (name(s[0]), s[1], not s[2])):
            for prefix in walks(previous):
                yield prefix + _arrow(relation, forward) + name(node)

    chains: list[str] = []
    for answer in wanted:
        if answer not in distance or distance[answer] == 0:
            continue
        for count, chain in enumerate(walks(answer), 1):
            chains.append(chain)
            if len(chains) >= max_chains:
                return chains
            if count >= per_answer:
                break
    return chains


def reasoning_chains(evidence: Iterable[Triple], roots: Sequence[str], max_chains: int = 64) -> list[str]:
    """Root-to-leaf paths of a depth-first walk over ``evidence`` from each root (the LLM's P3 input)."""
    adjacency = _adjacency(evidence)
    chains: list[str] = []
    for root in roots:
        stack: list[tuple[str, str, frozenset[str]]] = [(root, root, frozenset([root]))]
        while stack and len(chains) < max_chains:
            node, text, seen = stack.pop()
            steps = [(nxt, r, fwd) for nxt, r, fwd in adjacency.get(node, []) if nxt not in seen]
            if not steps:
                if text != root:
                    chains.append(text)
                continue
            for nxt, relation, forward in reversed(steps):
                stack.append((nxt, text + _arrow(relation, forward) + nxt, seen | {nxt}))
    return chains
