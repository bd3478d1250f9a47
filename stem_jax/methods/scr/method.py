"""SCR as a :class:`~stem_jax.methods.base.RetrievalMethod`: GNN features once, then batched beam search.

Built from a ``train-scr`` run folder (``context.options["checkpoint"]``). At build time the
relational GAT runs once over the whole KG (its entity features do not depend on the question);
:meth:`ScrMethod.prepare` encodes the split's questions with the frozen MiniLM (one vector per
question); :meth:`ScrMethod.retrieve` searches ``scr.batch_questions`` questions per jitted batch.

Answers are the end entities of the kept (path, answer) hypotheses, scored by the summed path
probability (eq. 13); a path that stops on the topic itself answers nothing (MetaQA never
counts the topic as an answer, and the other methods drop it too); with ``scr.min_hops`` = 1 (the default;
0 is the paper) a beam may not stop on the topic at all, so it spends no beam slot or probability on a path
that answers nothing (+1.8 / +4.0 / +2.2 Hit on a 1000-per-hop MetaQA test sample, F1 unchanged within
±2; experiments/results/scr-metaqa-test-minhops*). Evidence is the union of the
kept paths' triples; ``chains`` are the paths, readable. ``scr.answer_cut`` keeps answers with at least that share
of the best answer's probability (0 = every path end, the paper; choose it on dev with
experiments/scr_metaqa.py --split dev). On a KG with mediator nodes (Freebase CVTs; ``engine.skip_mediators``,
on by default) SCR obeys the engine's rule: a beam may not stop on a mediator (it walks through it), and a
mediator a beam was forced to end on is dropped from the answers (counted in ``scr_mediator_ends``). A run
trained with ``scr.relation_aware`` is the ``scr+rel`` variant (records and tables name it so). A run trained with ``scr.question_encoder=minilm`` tokenises the questions in
:meth:`ScrMethod.prepare` instead, and its search re-encodes every beam's grown context string with the
fine-tuned MiniLM at every step (one MiniLM call per batch and step; :mod:`.text`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from stem_jax.data.types import Question
from stem_jax.errors import StemError
from stem_jax.methods.base import MethodContext, Retrieval
from stem_jax.methods.scr.graph import build_neighbour_table
from stem_jax.methods.scr.model import ScrModel, scr_model
from stem_jax.methods.scr.search import Hypothesis, SearchTables, above_cut, aggregate_answers, beam_search
from stem_jax.methods.scr.train import encoder_inputs, kg_graph, load_run
from stem_jax.plan.factory import train_planner_flags


class ScrMethod:
    name = "scr"

    def __init__(self, context: MethodContext):
        checkpoint = context.options.get("checkpoint")
        if checkpoint is None:
            raise StemError("--method scr needs a trained SCR run\n  how to fix: train one with `stem-jax train-scr "
                            f"{train_planner_flags(context.dataset.name)} --out runs/scr-{context.dataset.name}` and "
                            f"pass --scr-checkpoint runs/scr-{context.dataset.name}")
        self.context = context
        self.folder = Path(checkpoint)
        began = time.perf_counter()
        self.spec, self.params, self.info = load_run(self.folder)
        index = context.index
        if self.spec.num_relations != index.num_relations:
            raise StemError(f"{self.folder} was trained on a KG with {self.spec.num_relations} relations, this one has "
                            f"{index.num_relations}\n  how to fix: use a run trained on this dataset")
        # The hub sample must be the one the model was trained with.
        self.neighbours = build_neighbour_table(index, self.spec.neighbours, self.info["seed"],
                                                per_edge=self.spec.relation_aware)
        if self.spec.relation_aware:  # a clearly labelled variant: its own name in records and tables
            self.name = "scr+rel"
        entity_text = np.asarray(context.embeddings.entities.array, np.float32)
        relation_text = jnp.asarray(np.asarray(context.embeddings.relations.array, np.float32))
        self.model = scr_model(self.spec)
        features = jax.jit(lambda p, g, r: self.model.apply(p, g, r, method=ScrModel.entities))(
            self.params, kg_graph(self.neighbours, entity_text), relation_text)
        encoder = self.pretrained = None
        if self.spec.minilm:
            from stem_jax.methods.scr.text import pretrained_for

            self.pretrained = pretrained_for(context.encoder)  # the sentence encoder's loaded weights, when MiniLM
            if self.info.get("text_encoder") not in (None, self.pretrained.name):
                raise StemError(f"{self.folder} was trained on MiniLM weights {self.info['text_encoder']}, the installed "
                                f"ones are {self.pretrained.name}\n  how to fix: install the weights it was trained "
                                "with, or retrain")
            _, encoder = encoder_inputs(self.spec, index, context.dataset.entity_names, [], self.pretrained)
        self.mediators = context.mediators  # None on KGs without mediators (MetaQA, the demo): search unchanged
        self.tables = SearchTables(jax.block_until_ready(features), jnp.asarray(entity_text), relation_text, encoder,
                                   no_stop=None if self.mediators is None else jnp.asarray(self.mediators))
        self.gnn_seconds = time.perf_counter() - began
        self.vectors: dict[str, np.ndarray] = {}
        self.skipped: Counter = Counter()
        config = context.config.scr
        self.beam, self.threshold = config.beam, config.threshold
        self.max_steps = min(config.max_steps, self.spec.max_steps)
        self.min_hops = config.min_hops
        self.answer_cut = config.answer_cut
        self.batch = max(1, config.batch_questions)

    def fingerprint(self) -> dict[str, Any]:
        config = self.context.config.scr
        return {"method": self.name, "checkpoint": str(self.folder), "step": self.info["step"],
                "params_sha": self.info["params_sha"], "spec": self.spec.as_dict(),
                "search": {"beam": config.beam, "threshold": config.threshold, "max_steps": self.max_steps,
                           "min_hops": config.min_hops, "answer_cut": config.answer_cut},
                "exclude_topic": self.context.config.engine.exclude_topic}

    def prepare(self, questions: Sequence[Question], *, show_progress: bool = False) -> dict[str, Any]:
        todo = [q for q in questions if q.qid not in self.vectors]
        began = time.perf_counter()
        if todo and self.spec.minilm:  # word pieces: the context string is encoded per beam and step
            from stem_jax.methods.scr.text import question_tokens

            vectors = question_tokens(self.pretrained, [q.text for q in todo])
            self.vectors.update({q.qid: v for q, v in zip(todo, vectors, strict=True)})
        elif todo:
            vectors = np.asarray(self.context.encoder.encode([q.text for q in todo]), np.float32)
            self.vectors.update({q.qid: v for q, v in zip(todo, vectors, strict=True)})
        return {"scr_checkpoint_step": self.info["step"], "scr_gnn_seconds": round(self.gnn_seconds, 2),
                "scr_encode_seconds": round(time.perf_counter() - began, 2), "scr_questions_encoded": len(todo),
                "scr_capped_entities": self.neighbours.capped}

    def retrieve(self, questions: Sequence[Question]) -> list[Retrieval]:
        self.prepare([q for q in questions if q.qid not in self.vectors])
        out: list[Retrieval] = []
        for start in range(0, len(questions), self.batch):
            out.extend(self._batch(questions[start : start + self.batch]))
        return out

    def _topic(self, question: Question) -> int:
        if not question.topic_entities:
            return -1
        return self.context.index.entity_ids.get(question.topic_entities[0], -1)

    def _batch(self, chunk: Sequence[Question]) -> list[Retrieval]:
        first = self.vectors[chunk[0].qid]
        topics = np.full(self.batch, -1, np.int64)
        vectors = np.zeros((self.batch, first.shape[-1]), first.dtype)
        for row, q in enumerate(chunk):
            topics[row] = self._topic(q)
            vectors[row] = self.vectors[q.qid]
        began = time.perf_counter()
        hypotheses, stats = beam_search(self.model, self.params, self.tables, self.neighbours, vectors, topics,
                                        beam=self.beam, threshold=self.threshold, max_steps=self.max_steps,
                                        min_hops=self.min_hops)
        ms = 1000 * (time.perf_counter() - began) / max(len(chunk), 1)
        return [self._retrieval(q, int(topics[row]), hypotheses[row], ms, stats) for row, q in enumerate(chunk)]

    def _retrieval(self, question: Question, topic: int, hypotheses: list[Hypothesis], ms: float,
                   stats: dict[str, int]) -> Retrieval:
        if topic < 0:
            self.skipped["topic entity not in the KG"] += 1
            return Retrieval(question.qid, [], stage_ms={"search": ms}, info={"scr_skip": "topic entity not in the KG"})
        answers = aggregate_answers(hypotheses)
        mediator_ends = 0
        if self.mediators is not None:  # only a beam forced to stop at max_steps can end on one
            kept = [(e, p) for e, p in answers if not self.mediators[e]]
            mediator_ends, answers = len(answers) - len(kept), kept
        if self.context.config.engine.exclude_topic:
            answers = [(e, p) for e, p in answers if e != topic]
        answers = above_cut(answers, self.answer_cut)
        evidence = sorted({t for h in hypotheses for t in h.triples})
        extra = {} if self.mediators is None else {"scr_mediator_ends": mediator_ends}
        return Retrieval(question.qid, answers, evidence=evidence, chains=[self._chain(h) for h in hypotheses],
                         stage_ms={"search": ms},
                         info={"scr_paths": len(hypotheses), "scr_forced_stops": sum(not h.stopped for h in hypotheses),
                               "scr_steps": stats["steps"], "scr_width": stats["widths"],
                               "scr_best_relations": self._relations(hypotheses[0]) if hypotheses else None,
                               **extra})

    def _relations(self, hypothesis: Hypothesis) -> list[str]:
        """The path's directed relations, ``name`` forwards and ``name^-1`` backwards (for loss analysis)."""
        index, r = self.context.index, self.context.index.num_relations
        return [index.relations[x % r] + ("" if x < r else "^-1") for x in hypothesis.relations]

    def _chain(self, hypothesis: Hypothesis) -> str:
        index, r = self.context.index, self.context.index.num_relations
        parts = [self.context.display(index.entities[hypothesis.entities[0]])]
        for relation, entity in zip(hypothesis.relations, hypothesis.entities[1:], strict=True):
            name = index.relations[relation % r]
            parts.append(f"-> {name} ->" if relation < r else f"<- {name} <-")
            parts.append(self.context.display(index.entities[entity]))
        return " ".join(parts) + f"  (p={hypothesis.prob:.3f})"
