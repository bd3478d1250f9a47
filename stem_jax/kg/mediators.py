"""Mediator nodes: KG nodes that join the parts of one fact and are never an answer themselves.

Freebase writes an n-ary fact (a marriage, a sports roster, a government position) as a *compound value
type* (CVT) node with one edge per part: ``Brett Gardner -sports.pro_athlete.teams-> m.0j2l5f6
-sports.sports_team_roster.team-> New York Yankees``. The middle node has no name, only its machine id
(``m.`` or ``g.`` followed by base-32 digits). A question walks *through* such a node; returning it as an
answer is always wrong. Two signs mark one:

* its string looks like a Freebase machine id (``m.0j2l5f6``, ``g.11b6ddd5w0``, ``/m/0j2l5f6``), or
* the KG names nearly all its entities (``entity_names.tsv`` covers at least 90% of them) and this one
  has no name: the few left unnamed are the joins (a KG that names only a few entities leaves the rest as
  they are, since their ids are what it shows).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

NAMED_SHARE = 0.9
MID_PATTERN = re.compile(r"^(?:[mg]\.|/[mg]/)[0-9a-z_]{2,}$")


def looks_like_mid(entity: str) -> bool:
    """True for Freebase machine ids (``m.0abc``, ``g.11bx``, ``/m/0abc``)."""
    return bool(MID_PATTERN.match(entity))


def mediator_mask(entities: Sequence[str], names: Mapping[str, str] | None = None,
                  display: Mapping[str, str] | None = None) -> np.ndarray:
    """bool [n]: which entities are mediator nodes (see the module docstring).

    ``names`` is the KG's entity-name table when it has one: then an entity without a name is a
    mediator. ``display`` (defaults to ``names``) gives the text shown for an entity; a mid-like display
    text marks a mediator too.
    """
    display = display if display is not None else (names or {})
    named = bool(names) and sum(e in names for e in entities) >= NAMED_SHARE * len(entities)
    mask = np.zeros(len(entities), bool)
    for i, entity in enumerate(entities):
        shown = display.get(entity, entity)
        mask[i] = looks_like_mid(shown) or (named and entity not in names)
    return mask
