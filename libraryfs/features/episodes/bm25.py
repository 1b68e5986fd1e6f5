"""Okapi BM25 over an episode's units, in plain Python: the scores of ``rank_bm25.BM25Okapi`` (k1 1.5, b
0.75, epsilon 0.25: the same formula, the same floating-point operations in the same order), without
importing numpy (0.1–0.5 s of every ``recall``/``answer`` process, issue 18) and touching only the units
that contain a query term.

Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond" (2009), §3.3; the idf floor
(a term in more than half the documents gets ``epsilon`` × the mean idf) is ``rank_bm25``'s.
``tests/unit/test_episodes_bm25.py`` compares the scores with ``rank_bm25`` bit for bit.
"""

from __future__ import annotations

import math
from array import array


class Okapi:
    """BM25 scores of ``corpus`` (a list of token lists) for a query's tokens. Postings are kept as two
    ``array("I")`` per term (documents, frequencies): :meth:`state` saves them as bytes, and a scorer
    restored by :meth:`from_state` decodes only the query's terms."""

    def __init__(self, corpus: list[list[str]], k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25):
        self.k1, self.b = k1, b
        self.size = len(corpus)
        #: term → (documents, frequencies) (first-seen order of terms, as rank_bm25 counts documents)
        self.postings: dict[str, tuple[array, array]] = {}
        self._packed: dict[str, tuple[bytes, bytes]] = {}
        doc_len = []
        total = 0
        for i, doc in enumerate(corpus):
            doc_len.append(len(doc))
            total += len(doc)
            freqs: dict[str, int] = {}
            for w in doc:
                freqs[w] = freqs.get(w, 0) + 1
            for w, f in freqs.items():
                p = self.postings.get(w)
                if p is None:
                    p = self.postings[w] = (array("I"), array("I"))
                p[0].append(i)
                p[1].append(f)
        avgdl = total / self.size if self.size else 0.0
        #: the length normalisation of each document: k1 · (1 − b + b · |d| / avgdl)
        self.norm = [k1 * (1 - b + b * n / avgdl) for n in doc_len] if avgdl else [k1 * (1 - b)] * self.size
        self.idf: dict[str, float] = {}
        idf_sum = 0.0
        negative = []
        for w, p in self.postings.items():
            idf = math.log(self.size - len(p[0]) + 0.5) - math.log(len(p[0]) + 0.5)
            self.idf[w] = idf
            idf_sum += idf
            if idf < 0:
                negative.append(w)
        eps = epsilon * (idf_sum / len(self.idf)) if self.idf else 0.0
        for w in negative:
            self.idf[w] = eps

    def _postings(self, term: str) -> tuple[array, array] | None:
        p = self.postings.get(term)
        if p is None and term in self._packed:
            docs, freqs = array("I"), array("I")
            docs.frombytes(self._packed[term][0])
            freqs.frombytes(self._packed[term][1])
            p = self.postings[term] = (docs, freqs)
        return p

    def get_scores(self, query: list[str]) -> list[float]:
        """The BM25 score of every document for ``query`` (its tokens; a repeated token counts again)."""
        scores = [0.0] * self.size
        k1p1 = self.k1 + 1
        for q in query:
            idf = self.idf.get(q) or 0
            p = self._postings(q)
            if p is None:  # a document without q adds idf · 0 = 0
                continue
            norm = self.norm
            for i, f in zip(p[0], p[1], strict=True):
                scores[i] += idf * (f * k1p1 / (f + norm[i]))
        return scores

    def state(self) -> dict:
        """The statistics as plain data (``marshal``-able; :meth:`from_state` restores them exactly)."""
        packed = dict(self._packed)
        packed.update({w: (d.tobytes(), f.tobytes()) for w, (d, f) in self.postings.items()})
        return {
            "k1": self.k1,
            "b": self.b,
            "size": self.size,
            "postings": packed,
            "norm": self.norm,
            "idf": self.idf,
        }

    @classmethod
    def from_state(cls, state: dict) -> Okapi:
        """The scorer :meth:`state` saved."""
        bm = cls.__new__(cls)
        bm.k1, bm.b, bm.size = state["k1"], state["b"], state["size"]
        bm.postings, bm._packed = {}, state["postings"]
        bm.norm, bm.idf = state["norm"], state["idf"]
        return bm
