"""The KG's schema graph: derived entity types and type-level edges (SAFE §3, appendix C.2).

SAFE needs a schema graph ``S = {(c, r, c')}`` whose nodes are entity types. MetaQA, FB15k-237 and
the demo KG carry no explicit types, so types are derived from relation signatures:

1. **Roles.** Every relation ``r`` has two roles, its domain ``r:head`` and its range ``r:tail``;
   a role's members are the entities seen in that position.
2. **Merging.** Two roles are one type when the share of the smaller role's members that also
   play the other role is at least ``containment`` (default 0.75); merging is transitive
   (union-find). On MetaQA every relation's domain is the same set of films (shares 0.76-0.94
   through ``release_year``), while the ranges stay apart: directors and writers overlap 0.66,
   actors and directors 0.12, so MetaQA gets the ten types *movie, director, writer, actor, year,
   language, genre, tag, rating, votes*. On the demo KG the people behind ``born_in``,
   ``directed_by``, ``starred_actors`` merge into one person type.
3. **Several types.** An entity has the type of every role it plays: a MetaQA person who directs
   and writes is ``{director, writer}``; a title that is also a tag is ``{movie, tag}``.
4. **Names** (what the encoder embeds for SimTyp and schema-edge texts): :data:`ROLE_NAMES` for
   MetaQA's and the demo KG's relations; for Freebase paths (FB15k-237) the domain is the type
   segment of the path (``/people/person/nationality`` -> ``person``) and the range its last
   segment (``nationality``); otherwise ``"<relation> subject"`` / ``"<relation> object"``. A
   merged type takes the name of its largest role.

Schema edges follow the QSE counting of appendix C.2: ``cnt_r(c, c')`` counts the triples
``(h, r, t)`` with ``c ∈ types(h)`` and ``c' ∈ types(t)``; an edge is kept when its support
``cnt >= min_support`` and its confidence ``cnt / |type c| >= min_confidence`` (the paper's
θ_supp = 1, θ_conf = 0.0001). One addition (``min_share``, default 0.01 in
:class:`~stem_jax.config.SafeConfig`): an edge must also carry that share of its relation's
triples. MetaQA names entities by their strings, so a title that is also a person's name or a
year ("Lucie Aubrac", "1984") types a handful of triples as ``(writer, written_by, movie)`` or
``(year, starred_actors, actor)``; the paper's confidence, relative to the (small) domain type,
keeps them (108 schema edges), and ADJ then aligns pseudo edges to them and bridges types that
never co-occur. With the share rule 19 remain: every real signature, plus the collisions that are
common (a genre that is also a film title).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from stem_jax.kg.index import KGIndex, relation_text

# relation: domain name, range name. MetaQA's relations all leave a movie, and persons are typed by what
# they do; the demo KG adds its last four.
ROLE_NAMES: dict[str, tuple[str, str]] = {
    relation: (domain, range_) for relation, domain, range_ in (line.split() for line in """
    directed_by      movie  director
    written_by       movie  writer
    starred_actors   movie  actor
    release_year     movie  year
    in_language      movie  language
    has_genre        movie  genre
    has_tags         movie  tag
    has_imdb_rating  movie  rating
    has_imdb_votes   movie  votes
    produced_by      movie  studio
    born_in          person city
    located_in       city   country
    headquartered_in studio city
    """.strip().splitlines())
}


def role_names(relation: str) -> tuple[str, str]:
    """(domain name, range name) of a relation, by the rule in the module docstring."""
    if relation in ROLE_NAMES:
        return ROLE_NAMES[relation]
    if relation.startswith("/"):
        first = relation.split(".")[0].strip("/").split("/")
        last = relation.rstrip("/").split("/")[-1]
        domain = first[1] if len(first) >= 2 else first[0]
        return domain.replace("_", " "), last.replace("_", " ")
    text = relation_text(relation)
    return f"{text} subject", f"{text} object"


@dataclasses.dataclass(frozen=True)
class KGSchema:
    """Derived types and the schema graph of one KG.

    Attributes:
      type_names: C type names (unique).
      entity_types: bool [E, C]; an entity may have several types.
      domain: int32 [R] type of each relation's heads; ``range_``: int32 [R] of its tails.
      edges: int32 [S, 3] schema edges (c, r, c'), sorted.
      support: int64 [S] triples behind each edge; confidence: float64 [S].
    """

    type_names: tuple[str, ...]
    entity_types: np.ndarray
    domain: np.ndarray
    range_: np.ndarray
    edges: np.ndarray
    support: np.ndarray
    confidence: np.ndarray

    @property
    def num_types(self) -> int:
        return len(self.type_names)

    def edge_text(self, edge: int, relations: tuple[str, ...]) -> str:
        c, r, c2 = self.edges[edge]
        return f"{self.type_names[c]} {relation_text(relations[r])} {self.type_names[c2]}"

    def summary(self) -> dict:
        counts = self.entity_types.sum(axis=0)
        return {"types": {n: int(k) for n, k in zip(self.type_names, counts, strict=True)},
                "schema_edges": int(len(self.edges)),
                "entities_with_several_types": int((self.entity_types.sum(axis=1) > 1).sum())}


def _find(parent: list[int], x: int) -> int:
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def derive_schema(index: KGIndex, *, containment: float = 0.75, min_support: int = 1,
                  min_confidence: float = 0.0001, min_share: float = 0.0) -> KGSchema:
    """Types from relation roles and the QSE-pruned schema graph of ``index`` (rules in the module docstring)."""
    triples = index.triples
    num_rel, num_ent = index.num_relations, index.num_entities
    # role-entity incidence: role 2r = heads of r, 2r + 1 = tails of r
    rows = np.concatenate([2 * triples[:, 1], 2 * triples[:, 1] + 1])
    cols = np.concatenate([triples[:, 0], triples[:, 2]])
    incidence = sp.csr_matrix((np.ones(len(rows), dtype=np.int64), (rows, cols)), shape=(2 * num_rel, num_ent))
    incidence.data[:] = 1
    incidence.sum_duplicates()
    incidence.data = np.minimum(incidence.data, 1)
    sizes = np.asarray(incidence.sum(axis=1)).ravel()
    overlap = (incidence @ incidence.T).tocoo()
    parent = list(range(2 * num_rel))
    for a, b, shared in zip(overlap.row, overlap.col, overlap.data, strict=True):
        if a < b and sizes[a] and sizes[b] and shared >= containment * min(sizes[a], sizes[b]):
            parent[_find(parent, a)] = _find(parent, b)
    roots = sorted({_find(parent, role) for role in range(2 * num_rel) if sizes[role]})
    class_of_root = {root: c for c, root in enumerate(roots)}
    role_class = np.full(2 * num_rel, -1, dtype=np.int32)
    for role in range(2 * num_rel):
        if sizes[role]:
            role_class[role] = class_of_root[_find(parent, role)]
    # a type takes the name of its largest role; clashes get a numeric suffix
    names: list[str] = []
    for root in roots:
        members = [role for role in range(2 * num_rel) if sizes[role] and _find(parent, role) == root]
        best = max(members, key=lambda role: (sizes[role], -role))
        names.append(role_names(index.relations[best // 2])[best % 2])
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name} {seen[name]}")
    num_types = len(roots)
    role_types = sp.csr_matrix((np.ones(int((role_class >= 0).sum())), (np.flatnonzero(role_class >= 0),
                                role_class[role_class >= 0])), shape=(2 * num_rel, num_types))
    entity_types = np.asarray((incidence.T @ role_types).todense() > 0)
    domain = role_class[0::2].copy()
    range_ = role_class[1::2].copy()

    # QSE counting: cnt_r(c, c') over all type pairs of each triple's ends
    type_support = entity_types.sum(axis=0)
    edges, support, confidence = [], [], []
    heads_t = sp.csr_matrix(entity_types[triples[:, 0]].astype(np.int64))
    tails_t = sp.csr_matrix(entity_types[triples[:, 2]].astype(np.int64))
    for r in range(num_rel):
        mask = triples[:, 1] == r
        if not mask.any():
            continue
        counts = (heads_t[mask].T @ tails_t[mask]).tocoo()
        relation_triples = int(mask.sum())
        for c, c2, n in zip(counts.row, counts.col, counts.data, strict=True):
            conf = n / max(type_support[c], 1)
            if n >= min_support and conf >= min_confidence and n >= min_share * relation_triples:
                edges.append((c, r, c2))
                support.append(n)
                confidence.append(conf)
    order = sorted(range(len(edges)), key=lambda i: edges[i])
    return KGSchema(
        type_names=tuple(unique),
        entity_types=entity_types,
        domain=domain,
        range_=range_,
        edges=np.asarray([edges[i] for i in order], dtype=np.int32).reshape(-1, 3),
        support=np.asarray([support[i] for i in order], dtype=np.int64),
        confidence=np.asarray([confidence[i] for i in order], dtype=np.float64),
    )
