"""An evaluation folder opened for exploring: its rows as a question x method grid, filters on it, and each
cell's trace (when the folder kept traces, :mod:`.traces`).

A cell's outcome is ``right`` or ``wrong`` (``error`` when the run failed, ``missing`` when the folder has no row);
its flags say how a wrong answer went wrong: ``loop`` (a phrase loop), ``corrupted`` (cut or repeated characters),
``budget`` (it hit the token budget before ending). The views draw this; nothing here draws.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EvaluationError
from .scoring import looping
from .store import read_meta, read_rows, unique_rows
from .traces import NO_TRACES, has_traces, load_trace, traced

FILTERS = {
    "all": "every question",
    "disagree": "questions where the methods disagree",
    "single_right_ensemble_wrong": "the best single model right, the ensemble wrong",
    "ensemble_right_single_wrong": "the ensemble right, the best single model wrong",
    "all_wrong": "every method wrong",
}
"""The grid's filters (key -> what it shows); the two "ensemble" ones compare the chosen ensemble method."""
SORTS = {"qid": "question number", "qid_desc": "question number, last first", "right": "fewest methods right first"}


@dataclass
class Cell:
    qid: int
    method: str
    outcome: str  # right | wrong | error | missing
    flags: tuple[str, ...] = ()
    prediction: str | None = None
    gold: str | None = None
    tokens: int = 0
    traced: bool = False

    def to_dict(self) -> dict:
        return {"qid": self.qid, "method": self.method, "outcome": self.outcome, "flags": list(self.flags),
                "prediction": self.prediction, "gold": self.gold, "tokens": self.tokens, "traced": self.traced}


def cell_of(row: dict | None, qid: int, method: str, has_trace: bool = False) -> Cell:
    if row is None:
        return Cell(qid, method, "missing")
    flags = tuple(name for name, on in (("loop", looping(row)), ("corrupted", bool(row.get("corrupted"))),
                                        ("budget", row.get("stop_reason") == "budget")) if on)
    outcome = "error" if row.get("error") and not row.get("text") else ("right" if row.get("correct") else "wrong")
    return Cell(qid, method, outcome, flags, row.get("prediction"), row.get("gold"), int(row.get("tokens") or 0), has_trace)


@dataclass
class Folder:
    """An evaluation folder as the explorer reads it."""

    path: Path
    meta: dict
    rows: list[dict]
    methods: list[str]
    question_ids: list[int]
    traced: set[tuple[int, str]] = field(default_factory=set)

    @property
    def has_traces(self) -> bool:
        return bool(self.traced)

    @property
    def traces_note(self) -> str:
        return "" if self.has_traces else NO_TRACES

    def row(self, qid: int, method: str) -> dict | None:
        return self._index().get((qid, method))

    def _index(self) -> dict:
        if not hasattr(self, "_rows_by_key"):
            self._rows_by_key = {(r["qid"], r["method"]): r for r in self.rows}
        return self._rows_by_key

    def question(self, qid: int) -> str:
        """The question's text (its first row's), from an index of the rows built once: a grid of every question
        reads each row once, not once per question."""
        if not hasattr(self, "_questions"):
            questions: dict[int, str] = {}
            for r in self.rows:
                questions.setdefault(r["qid"], str(r.get("question") or ""))
            self._questions = questions
        return self._questions.get(qid, "")

    def trace(self, qid: int, method: str):
        """The answer's trace, or None when the folder kept none for it."""
        return load_trace(self.path, qid, method) if (qid, method) in self.traced else None

    def readable_trace(self, qid: int, method: str):
        """:meth:`trace`, with a damaged trace file counted as none (statistics and reports skip it; opening that
        answer says why)."""
        try:
            return self.trace(qid, method)
        except EvaluationError:
            return None

    def singles(self) -> list[str]:
        return [m for m in self.methods if m.startswith("single:")]

    def ensembles(self) -> list[str]:
        return [m for m in self.methods if not m.startswith("single:")]

    def accuracy(self, method: str) -> float:
        rows = [r for r in self.rows if r["method"] == method]
        return sum(1 for r in rows if r.get("correct")) / len(rows) if rows else 0.0

    def best_single(self) -> str | None:
        """The single model with the most right answers (the first listed on a tie)."""
        singles = self.singles()
        return max(singles, key=self.accuracy) if singles else None

    def cells(self) -> dict[tuple[int, str], Cell]:
        return {(q, m): cell_of(self.row(q, m), q, m, (q, m) in self.traced) for q in self.question_ids for m in self.methods}


def open_folder(path: str | os.PathLike) -> Folder:
    """Read an evaluation folder (``meta.json`` and ``rows.jsonl``; ``traces/`` when it has one) without writing."""
    path = Path(path)
    if not (path / "meta.json").exists() or not (path / "rows.jsonl").exists():
        raise EvaluationError(f"{path.name or 'This folder'} is not an evaluation folder: it needs meta.json and rows.jsonl "
                              "(written by `python -m ensemble evaluate --out DIR`).")
    meta = read_meta(path / "meta.json")  # a regular file within its size limit; messages name the file, not the path
    try:
        methods = [str(m) for m in meta["methods"]]
        qids = [int(q) for q in meta["question_ids"]]
    except (ValueError, KeyError, TypeError, OverflowError) as exc:
        raise EvaluationError("meta.json is not an evaluation meta.json (it lacks its methods or question numbers).") from exc
    rows, _ = unique_rows(read_rows(path / "rows.jsonl"))
    found = traced(path) if has_traces(path) else set()
    return Folder(path, meta, rows, methods, qids, found)


def _right(cells: dict, qid: int, method: str | None) -> bool | None:
    cell = cells.get((qid, method)) if method else None
    return None if cell is None or cell.outcome in ("missing", "error") else cell.outcome == "right"


def filter_questions(folder: Folder, kind: str = "all", ensemble: str | None = None, sort: str = "qid") -> list[int]:
    """The questions a grid filter keeps, in the chosen order (``FILTERS``, ``SORTS``); ``ensemble``: the ensemble
    method the "ensemble" filters compare with the best single model (default: the first ensemble method)."""
    if kind not in FILTERS:
        raise EvaluationError(f"Unknown grid filter {str(kind)[:40]!r}; filters: {', '.join(FILTERS)}.")
    cells = folder.cells()
    single = folder.best_single()
    ensemble = ensemble if ensemble in folder.methods else next(iter(folder.ensembles()), None)
    kept = []
    for q in folder.question_ids:
        answers = [_right(cells, q, m) for m in folder.methods]
        known = [a for a in answers if a is not None]
        s, e = _right(cells, q, single), _right(cells, q, ensemble)
        keep = {
            "all": True,
            "disagree": len(set(known)) > 1,
            "single_right_ensemble_wrong": s is True and e is False,
            "ensemble_right_single_wrong": e is True and s is False,
            "all_wrong": bool(known) and not any(known),
        }[kind]
        if keep:
            kept.append(q)
    if sort == "qid_desc":
        kept.reverse()
    elif sort == "right":
        kept.sort(key=lambda q: (sum(1 for m in folder.methods if _right(cells, q, m)), q))
    elif sort != "qid":
        raise EvaluationError(f"Unknown grid order {str(sort)[:40]!r}; orders: {', '.join(SORTS)}.")
    return kept
