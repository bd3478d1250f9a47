"""A generated film-world KG with templated 1-3 hop questions: the project's embedded default.

Deterministic for a given seed, a few thousand triples, and every question carries its gold
relation path, so the whole pipeline can run offline without third-party data. Answers are found
by walking the path from the topic entity; the topic itself is excluded from intermediate and
final sets, as MetaQA does.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from stem_jax.data.types import Dataset, PathStep, Question, Triple
from stem_jax.errors import DataError

_ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "st", "th", "ch"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
_CODAS = ["", "n", "r", "s", "l", "m", "th", "x"]
_GENRES = ["Drama", "Comedy", "Thriller", "Western", "Musical", "Noir", "Horror", "Romance", "Documentary",
           "Animation", "Adventure", "Mystery"]
_COUNTRIES = ["Arvenia", "Beloria", "Calvany", "Dorstria", "Elvador", "Fennmark", "Galtria", "Hestovia"]

SPLITS = ("train", "dev", "test")


@dataclasses.dataclass(frozen=True)
class Template:
    path: tuple[PathStep, ...]
    phrasings: tuple[str, ...]  # "{}" is the topic mention


def _template(row: str) -> Template:
    # "<starred_actors directed_by | phrasing | phrasing": the relation path (a leading "<" walks a relation
    # backwards, tail to head) and how questions ask it, "[{}]" standing for the topic.
    path, *phrasings = (cell.strip() for cell in row.split("|"))
    return Template(tuple(PathStep(step.lstrip("<"), not step.startswith("<")) for step in path.split()),
                    tuple(phrasings))


TEMPLATES: tuple[Template, ...] = tuple(_template(row) for row in """
    directed_by | who directed [{}] | which person was the director of [{}]
    <directed_by | which films did [{}] direct | what movies were directed by [{}]
    starred_actors | who starred in [{}] | which actors appear in [{}]
    <starred_actors | which films did [{}] act in | what movies star [{}]
    has_genre | what genre is [{}] | which genres describe [{}]
    release_year | when was [{}] released | in which year did [{}] come out
    produced_by | which studio produced [{}] | who was the production company of [{}]
    born_in | where was [{}] born | what is the birthplace of [{}]
    <starred_actors starred_actors | who acted together with [{}] | which actors shared a film with [{}]
    <starred_actors directed_by | who directed the films starring [{}] | which directors made movies with [{}] in the cast
    <directed_by starred_actors | which actors starred in films directed by [{}] | who appeared in movies that [{}] directed
    directed_by born_in | where was the director of [{}] born | what city is the director of [{}] from
    born_in located_in | in which country was [{}] born | what country is the birthplace of [{}] in
    <written_by has_genre | what genres are the films written by [{}] | which genres did [{}] write films in
    <starred_actors directed_by born_in | where were the directors of films starring [{}] born | which cities do the directors of [{}]'s films come from
    directed_by <directed_by starred_actors | who starred in films by the director of [{}] | which actors appear in movies made by whoever directed [{}]
    <directed_by produced_by headquartered_in | where are the studios behind films directed by [{}] based | in which cities are the producers of [{}]'s films headquartered
    written_by <written_by release_year | when were the films by the writer of [{}] released | in which years did the screenwriter of [{}] release films
""".strip().splitlines())


class _Namer:
    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: int) -> str:
        parts = [
            self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)
            for _ in range(syllables)
        ]
        return "".join(parts).capitalize()

    def unique(self, make) -> str:
        while True:
            name = make()
            if name not in self.used:
                self.used.add(name)
                return name


def generate_demo_kg(
    seed: int = 0, *, n_films: int = 500, n_people: int = 500, n_cities: int = 30, n_studios: int = 24
) -> list[Triple]:
    """The demo KG's triples; same seed, same triples."""
    rng = np.random.default_rng(seed)
    namer = _Namer(rng)
    people = [namer.unique(lambda: f"{namer.word(2)} {namer.word(int(rng.integers(1, 3)))}") for _ in range(n_people)]
    films = [namer.unique(lambda: "The " + namer.word(int(rng.integers(2, 4)))) for _ in range(n_films)]
    cities = [namer.unique(lambda: namer.word(int(rng.integers(2, 4))) + " City") for _ in range(n_cities)]
    studios = [namer.unique(lambda: namer.word(2) + " Pictures") for _ in range(n_studios)]
    triples: list[Triple] = []
    for city in cities:
        triples.append((city, "located_in", str(rng.choice(_COUNTRIES))))
    for studio in studios:
        triples.append((studio, "headquartered_in", str(rng.choice(cities))))
    for person in people:
        triples.append((person, "born_in", str(rng.choice(cities))))
    # A few prolific directors and actors make hub-like nodes, as real KGs have.
    popularity = rng.permutation(1.0 / np.arange(1, n_people + 1) ** 0.8)
    weights = popularity / popularity.sum()
    for film in films:
        director = people[int(rng.choice(n_people, p=weights))]
        triples.append((film, "directed_by", director))
        for writer in rng.choice(n_people, size=int(rng.integers(1, 3)), replace=False):
            triples.append((film, "written_by", people[int(writer)]))
        for actor in rng.choice(n_people, size=int(rng.integers(2, 6)), replace=False, p=weights):
            triples.append((film, "starred_actors", people[int(actor)]))
        for genre in rng.choice(len(_GENRES), size=int(rng.integers(1, 3)), replace=False):
            triples.append((film, "has_genre", _GENRES[int(genre)]))
        triples.append((film, "release_year", str(int(rng.integers(1950, 2025)))))
        triples.append((film, "produced_by", str(rng.choice(studios))))
    return list(dict.fromkeys(triples))


def follow_path(triples_by_step: dict[tuple[str, bool], dict[str, list[str]]], topic: str, path) -> set[str]:
    """Entities reached from ``topic`` along ``path`` (topic excluded at every step)."""
    frontier = {topic}
    for step in path:
        table = triples_by_step.get((step.relation, step.forward), {})
        frontier = {n for e in frontier for n in table.get(e, ())} - {topic}
        if not frontier:
            break
    return frontier


def adjacency_by_step(triples: list[Triple]) -> dict[tuple[str, bool], dict[str, list[str]]]:
    table: dict[tuple[str, bool], dict[str, list[str]]] = {}
    for head, rel, tail in triples:
        table.setdefault((rel, True), {}).setdefault(head, []).append(tail)
        table.setdefault((rel, False), {}).setdefault(tail, []).append(head)
    return table


def _topic_pool(template: Template, adjacency) -> list[str]:
    first = template.path[0]
    return sorted(adjacency.get((first.relation, first.forward), {}))


def generate_demo_questions(
    triples: list[Triple], *, seed: int = 0, per_hop: int = 150, max_answers: int = 25
) -> dict[str, list[Question]]:
    """Templated questions for each split; a (template, topic) pair lands in exactly one split.

    Every valid pair of a hop count is shuffled once; test takes the first ``per_hop``, dev the
    next ``per_hop`` and train up to ``2 * per_hop`` of the rest, so test is always full.
    """
    rng = np.random.default_rng(seed + 1)
    adjacency = adjacency_by_step(triples)
    candidates: dict[int, list[tuple[Template, str, tuple[str, ...]]]] = {}
    for template in TEMPLATES:
        for topic in _topic_pool(template, adjacency):
            answers = follow_path(adjacency, topic, template.path)
            if answers and len(answers) <= max_answers:
                candidates.setdefault(len(template.path), []).append((template, topic, tuple(sorted(answers))))
    quotas = {"test": per_hop, "dev": per_hop, "train": 2 * per_hop}
    splits: dict[str, list[Question]] = {split: [] for split in SPLITS}
    for hops, pool in sorted(candidates.items()):
        order = rng.permutation(len(pool))
        cursor = 0
        for split in ("test", "dev", "train"):
            chosen = order[cursor : cursor + quotas[split]]
            cursor += len(chosen)
            for i, index in enumerate(chosen):
                template, topic, answers = pool[int(index)]
                phrasing = template.phrasings[int(rng.integers(len(template.phrasings)))]
                splits[split].append(
                    Question(
                        qid=f"demo/{split}/{hops}-hop/{i}",
                        text=phrasing.format(topic).replace("[", "").replace("]", ""),
                        topic_entities=(topic,),
                        answers=answers,
                        hops=hops,
                        qtype="_".join(("fwd:" if s.forward else "inv:") + s.relation for s in template.path),
                        gold_path=template.path,
                        source=f"demo:{split}:{hops}-hop:{i}",
                    )
                )
    return splits


def load_demo(*, split: str = "test", seed: int = 0, per_hop: int = 150) -> Dataset:
    """The embedded default dataset: generated KG plus templated questions of one split."""
    if split not in SPLITS:
        raise DataError(f"unknown demo split {split!r}", fix=f"use one of {', '.join(SPLITS)}")
    triples = generate_demo_kg(seed)
    questions = generate_demo_questions(triples, seed=seed, per_hop=per_hop)[split]
    # the generator drops the topic from every set (follow_path), as MetaQA does: its bound walks the same way
    return Dataset(name="demo", questions=questions, triples=triples, excludes_topic=True)
