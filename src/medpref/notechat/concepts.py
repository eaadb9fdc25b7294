"""Medical concept extraction: medspacy + QuickUMLS, with negation from ConText.

NoteChat grounds its plan in the note's UMLS concepts (CUIs): they are the keywords of
the planning prompt, the checklist the role-play works through, and the unit of the
factuality metric and of medical-term density. The pipeline is a blank spaCy English
model (no model download is possible) with medspacy's clinical tokenizer, PyRuSH
sentence splitting, QuickUMLS concept matching and ConText, which marks mentions such as
"denies fever" as negated.

QuickUMLS reads NLTK's stop-word corpus when it starts (and tries to download it when
it is missing); the project's own list (``configs/notechat/stopwords.txt``) is handed to
it instead, so nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from medpref.notechat.config import QuickUMLSParams


@dataclass(frozen=True)
class Mention:
    """A concept found in a text: its CUI, the words matched and whether negated."""

    cui: str
    text: str
    start: int
    end: int
    negated: bool = False
    similarity: float = 1.0


def read_stopwords(path: str | Path) -> list[str]:
    """One word per line; blank lines and ``#`` comments are skipped."""
    words = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip().lower()
        if line:
            words.append(line)
    return words


class _StopwordCorpus:
    """Stands in for ``nltk.corpus.stopwords`` while QuickUMLS starts."""

    def __init__(self, words: Sequence[str]):
        self._words = list(words)

    def words(self, fileids: str | None = None) -> list[str]:
        return list(self._words)


def _check_index(index_dir: Path) -> None:
    needed = ("umls-simstring.db", "cui-semtypes.db", "database_backend.flag")
    missing = [n for n in needed if not (index_dir / n).exists()]
    if missing:
        raise FileNotFoundError(
            f"{index_dir} is not a QuickUMLS index (missing {', '.join(missing)}); build it "
            "with `python -m medpref.notechat.lexicon_index <lexicon> <index>` (dvc stage "
            "notechat_index) or point notechat.umls_index at a licensed UMLS index")


def build_pipeline(index_dir: str | Path, stopwords: Sequence[str],
                   quickumls: QuickUMLSParams | None = None):
    """A spaCy pipeline: medspacy tokenizer, PyRuSH, QuickUMLS, ConText."""
    import medspacy
    import nltk
    import spacy
    from loguru import logger

    index_dir = Path(index_dir)
    _check_index(index_dir)
    q = quickumls or QuickUMLSParams()
    logger.disable("PyRuSH")  # PyRuSH logs every sentence boundary at DEBUG level
    nlp = medspacy.load(spacy.blank("en"),
                        medspacy_enable=["medspacy_tokenizer", "medspacy_pyrush"])
    config = {"quickumls_fp": str(index_dir), "threshold": q.threshold,
              "similarity_name": q.similarity, "window": q.window,
              "min_match_length": q.min_match_length,
              "accepted_semtypes": q.accepted_semtypes, "best_match": True}
    with mock.patch.object(nltk.corpus, "stopwords", _StopwordCorpus(stopwords)):
        nlp.add_pipe("medspacy_quickumls", config=config)
    nlp.add_pipe("medspacy_context")
    return nlp


def _mentions_of(doc) -> list[Mention]:
    return [Mention(cui=ent.label_, text=ent.text, start=ent.start_char, end=ent.end_char,
                    negated=bool(ent._.is_negated), similarity=float(ent._.similarity))
            for ent in doc.ents]


class ConceptExtractor:
    """Concept mentions of texts, memoised (dialogue turns are re-read every round)."""

    def __init__(self, nlp, index_dir: str | Path | None = None):
        self.nlp = nlp
        self.index_dir = str(index_dir) if index_dir else None
        self._memo: dict[str, list[Mention]] = {}

    @classmethod
    def from_index(cls, index_dir: str | Path, stopwords_path: str | Path,
                   quickumls: QuickUMLSParams | None = None) -> ConceptExtractor:
        nlp = build_pipeline(index_dir, read_stopwords(stopwords_path), quickumls)
        return cls(nlp, index_dir)

    def mentions_many(self, texts: Iterable[str]) -> list[list[Mention]]:
        texts = list(texts)
        todo = list(dict.fromkeys(t for t in texts if t not in self._memo))
        for text, doc in zip(todo, self.nlp.pipe(todo)):
            self._memo[text] = _mentions_of(doc)
        return [list(self._memo[t]) for t in texts]

    def mentions(self, text: str) -> list[Mention]:
        return self.mentions_many([text])[0]

    def cuis(self, text: str) -> set[str]:
        return {m.cui for m in self.mentions(text)}
