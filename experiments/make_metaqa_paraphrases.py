"""Write experiments/data/metaqa_paraphrases.tsv: hand-written paraphrases of MetaQA question types.

    STEM_DATA_DIR=../shared/data python experiments/make_metaqa_paraphrases.py

Every phrasing below was written for this project and deliberately avoids MetaQA's own wording
("helmed", "penned", "pictures", "performers", "cast", question forms MetaQA never uses such as
"Name ..." and "List ..."); `tests/plan/test_plan_quality.py` checks that no masked paraphrase equals a
masked MetaQA question. Each phrasing is filled with one topic entity sampled (seeded) from the
MetaQA KB among entities of the right type whose gold path reaches 1-50 answers, so the file holds
real KB entity names but no MetaQA question text. Answers are not stored: the loader
(`stem_jax.eval.plan_quality.load_qtype_questions`) derives them from the KB along the qtype's gold
path, exactly as the oracle would.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

PARAPHRASES: dict[str, tuple[str, ...]] = {
    # ---- 1 hop ------------------------------------------------------------------------------
    "actor_to_movie": ("Name the pictures that feature {} in the cast",
                       "In which productions has {} had a role?",
                       "List every film with {} among its performers"),
    "director_to_movie": ("Which pictures were helmed by {}?",
                          "Name the films {} was behind the camera for",
                          "List the movies whose director is {}"),
    "movie_to_actor": ("Name the cast members of {}",
                       "Which performers appear in {}?",
                       "Who had roles in the picture {}?"),
    "movie_to_director": ("Who helmed {}?",
                          "Name the filmmaker behind {}",
                          "Which person was behind the camera on {}?"),
    "movie_to_genre": ("What sort of picture is {} considered?",
                       "Which category of cinema does {} belong to?",
                       "Classify {} by genre"),
    "movie_to_imdbrating": ("What score does {} have on IMDb?",
                            "How is {} rated on IMDb?",
                            "Give me the IMDb rating for {}"),
    "movie_to_imdbvotes": ("How many votes did {} get on IMDb?",
                           "What is the IMDb vote count of {}?",
                           "How many people voted for {} on IMDb?"),
    "movie_to_language": ("In what language was {} made?",
                          "Which tongue is spoken in {}?",
                          "What language do the characters of {} speak?"),
    "movie_to_tags": ("Which keywords are associated with {}?",
                      "Give me some tags for {}",
                      "What topics is {} tagged with?"),
    "movie_to_writer": ("Who penned {}?",
                        "Name the screenwriter responsible for {}",
                        "Who authored the script of {}?"),
    "movie_to_year": ("In which year did {} come out?",
                      "When did {} premiere?",
                      "What year is {} from?"),
    "tag_to_movie": ("Name some films tagged with {}",
                     "Which pictures carry the keyword {}?",
                     "List movies labelled {}"),
    "writer_to_movie": ("Name the films {} wrote the screenplay for",
                        "Which pictures list {} as screenwriter?",
                        "What has {} written for the screen?"),
    # ---- 2 hops -----------------------------------------------------------------------------
    "actor_to_movie_to_actor": ("Name the performers who shared the screen with {}",
                                "Who has appeared in a film alongside {}?",
                                "Which actors were cast in the same pictures as {}?"),
    "actor_to_movie_to_director": ("Name the directors {} has worked under",
                                   "Who helmed the pictures featuring {}?",
                                   "Which filmmakers made movies with {} in the cast?"),
    "actor_to_movie_to_genre": ("What kinds of films does {} appear in?",
                                "Which genres do the pictures featuring {} belong to?",
                                "In what categories of cinema has {} acted?"),
    "actor_to_movie_to_language": ("In which languages are the films featuring {}?",
                                   "What languages are spoken in pictures with {} in the cast?",
                                   "Which tongues are used in movies that {} played in?"),
    "actor_to_movie_to_writer": ("Who penned the scripts of films featuring {}?",
                                 "Name the screenwriters of pictures {} acted in",
                                 "Which authors wrote movies with {} in the cast?"),
    "actor_to_movie_to_year": ("In which years did films featuring {} come out?",
                               "When did the pictures with {} in the cast premiere?",
                               "List the years in which movies starring {} opened"),
    "director_to_movie_to_actor": ("Name the performers in pictures helmed by {}",
                                   "Who was cast in films that {} made?",
                                   "Which actors have worked under director {}?"),
    "director_to_movie_to_director": ("Who shared directing credits with {}?",
                                      "Name the filmmakers who co-helmed a picture with {}",
                                      "With whom did {} direct a film?"),
    "director_to_movie_to_genre": ("What kinds of films does {} make as a director?",
                                   "Which genres do the pictures helmed by {} belong to?",
                                   "In what categories of cinema has {} directed?"),
    "director_to_movie_to_language": ("In which languages are the films helmed by {}?",
                                      "What languages are spoken in pictures made by director {}?",
                                      "Which tongues are used in movies {} was behind the camera for?"),
    "director_to_movie_to_writer": ("Who penned the scripts for films helmed by {}?",
                                    "Name the screenwriters whose scripts {} has filmed",
                                    "Which authors wrote pictures that {} directed?"),
    "director_to_movie_to_year": ("In which years did films helmed by {} come out?",
                                  "When did the pictures {} directed premiere?",
                                  "List the years in which movies by director {} opened"),
    "movie_to_actor_to_movie": ("Which other pictures feature the cast of {}?",
                                "Name films where someone from the cast of {} also appears",
                                "In what other movies do the performers of {} show up?"),
    "movie_to_director_to_movie": ("What else did the filmmaker behind {} make?",
                                   "Name other pictures by whoever helmed {}",
                                   "Which films were made by the person who directed {}?"),
    "movie_to_writer_to_movie": ("What else did the screenwriter of {} pen?",
                                 "Name other scripts by whoever wrote {}",
                                 "Which pictures were penned by the author of {}?"),
    "writer_to_movie_to_actor": ("Name the performers in films scripted by {}",
                                 "Who was cast in pictures that {} penned?",
                                 "Which actors appear in movies based on scripts by {}?"),
    "writer_to_movie_to_director": ("Who helmed the films scripted by {}?",
                                    "Name the filmmakers who shot scripts by {}",
                                    "Which directors made pictures penned by {}?"),
    "writer_to_movie_to_genre": ("What kinds of films does {} write?",
                                 "Which genres do the scripts by {} fall into?",
                                 "In what categories are the pictures penned by {}?"),
    "writer_to_movie_to_language": ("In which languages are the films scripted by {}?",
                                    "What languages are spoken in pictures penned by {}?",
                                    "Which tongues are used in movies {} wrote?"),
    "writer_to_movie_to_writer": ("Who shared writing credits with {}?",
                                  "Name the screenwriters who co-penned a film with {}",
                                  "With whom did {} write a script?"),
    "writer_to_movie_to_year": ("In which years did films scripted by {} come out?",
                                "When did the pictures penned by {} premiere?",
                                "List the years in which movies written by {} opened"),
    # ---- 3 hops -----------------------------------------------------------------------------
    "movie_to_actor_to_movie_to_director": ("Who helmed the other pictures featuring the cast of {}?",
                                            "Name the filmmakers behind films where performers of {} also appear"),
    "movie_to_actor_to_movie_to_genre": ("What kinds of films do the performers of {} also appear in?",
                                         "Name the genres of other pictures featuring the cast of {}"),
    "movie_to_actor_to_movie_to_language": ("In which languages are the other films featuring the cast of {}?",
                                            "What tongues are spoken in pictures where performers of {} also appear?"),
    "movie_to_actor_to_movie_to_writer": ("Who penned the other pictures featuring the cast of {}?",
                                          "Name the screenwriters of films where performers of {} also appear"),
    "movie_to_actor_to_movie_to_year": ("In which years did the other films featuring the cast of {} come out?",
                                        "When did pictures with performers from {} premiere?"),
    "movie_to_director_to_movie_to_actor": ("Who was cast in the other pictures by the filmmaker behind {}?",
                                            "Name the performers in films made by whoever helmed {}"),
    "movie_to_director_to_movie_to_genre": ("What kinds of films does the filmmaker behind {} make?",
                                            "Name the genres of pictures by whoever helmed {}"),
    "movie_to_director_to_movie_to_language": ("In which languages are the pictures by the filmmaker behind {}?",
                                               "What tongues are spoken in films made by whoever helmed {}?"),
    "movie_to_director_to_movie_to_writer": ("Who penned the pictures made by the filmmaker behind {}?",
                                             "Name the screenwriters of films by whoever helmed {}"),
    "movie_to_director_to_movie_to_year": ("In which years did pictures by the filmmaker behind {} come out?",
                                           "When did the films made by whoever helmed {} premiere?"),
    "movie_to_writer_to_movie_to_actor": ("Who was cast in the pictures penned by the author of {}?",
                                          "Name the performers in films scripted by whoever wrote {}"),
    "movie_to_writer_to_movie_to_director": ("Who helmed the pictures penned by the author of {}?",
                                             "Name the filmmakers behind films scripted by whoever wrote {}"),
    "movie_to_writer_to_movie_to_genre": ("What kinds of films does the author of {} write?",
                                          "Name the genres of pictures scripted by whoever wrote {}"),
    "movie_to_writer_to_movie_to_language": ("In which languages are the pictures penned by the author of {}?",
                                             "What tongues are spoken in films scripted by whoever wrote {}?"),
    "movie_to_writer_to_movie_to_year": ("In which years did pictures penned by the author of {} come out?",
                                         "When did the films scripted by whoever wrote {} premiere?"),
}


def main(argv: list[str] | None = None) -> int:
    # no options: the parser gives `--help` (and refuses stray arguments) instead of writing the file
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    from stem_jax.data.metaqa import find_kb, read_kb
    from stem_jax.data.types import SkipReport
    from stem_jax.kg.index import build_index
    from stem_jax.kg.paths import follow_relation_path
    from stem_jax.plan.oracle import metaqa_gold_path

    root = Path(os.environ.get("STEM_DATA_DIR", "../shared/data")) / "metaqa"
    index = build_index(read_kb(find_kb(root), SkipReport()))
    rng = np.random.default_rng(2026)
    used: set[str] = set()
    lines = []
    for qtype, phrasings in PARAPHRASES.items():
        path = metaqa_gold_path(qtype)
        first = index.relation_ids[path[0].relation]
        column = 0 if path[0].forward else 2
        pool = sorted({int(e) for e in index.triples[index.triples[:, 1] == first][:, column]})
        for phrasing in phrasings:
            for _ in range(1000):
                entity = pool[int(rng.integers(len(pool)))]
                name = index.entities[entity]
                if name in used or "[" in name or "]" in name:
                    continue
                answers, _ = follow_relation_path(index, entity, path)
                if 1 <= len(answers) <= 50:
                    break
            else:
                raise SystemExit(f"no topic for {qtype}")
            used.add(name)
            lines.append(f"{qtype}\t{phrasing.format('[' + name + ']')}")
    out = Path(__file__).parent / "data" / "metaqa_paraphrases.tsv"
    out.parent.mkdir(parents=True, exist_ok=True)
    header = ("# Hand-written paraphrases of MetaQA question types (stem_jax project, not MetaQA text).\n"
              "# qtype<TAB>question with [topic entity]; answers come from the KB along the qtype's gold path.\n"
              "# Regenerate: python experiments/make_metaqa_paraphrases.py\n")
    out.write_text(header + "\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} questions over {len(PARAPHRASES)} qtypes to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
