"""Language-aware n-gram text metrics shared by every stage that compares text.

One tokenisation for counting and overlap (ROUGE, word counts, chunking): lower-cased,
**one token per Han/kana character** (Chinese and Japanese are written without spaces, so
a "word" split on non-letters would swallow a whole sentence and score 0), and Unicode
word tokens (letters/digits runs) for everything else. English tokens may be Porter-stemmed
the way ``rouge-score`` does (nltk's default ``NLTK_EXTENSIONS`` mode, only tokens longer
than 3 characters).

English ROUGE is exactly ``rouge-score``'s: its own tokeniser (ASCII letter/digit runs,
so "naïve" gives "na", "ve") and stemmer, so our numbers equal those of
``RougeScorer(use_stemmer=True)``; Chinese ROUGE uses the one-token-per-character split.

BLEU uses the standard tokenisers of ``sacrebleu``: ``13a`` (the WMT/mteval one,
case-sensitive, punctuation as tokens) for space-delimited text and ``zh`` (one token
per Chinese character, ``13a`` for the rest) as soon as the text holds CJK characters.
Sentence BLEU-4 uses sacrebleu's default sentence smoothing (``exp``: a zero n-gram
count k-th in a row counts as 1/2^k matches); ``smooth`` switches it.

Self-BLEU is Texygen's (Zhu et al. 2018): each text of a corpus is the hypothesis, every
other text of the same corpus a reference; the mean over texts. Lower = more diverse.

Every score is a fraction in [0, 1]; callers scale to ×100 where their paper does.
An empty side scores 0.
"""

from __future__ import annotations

import bisect
import random
import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal, NamedTuple

Lang = Literal["auto", "zh", "en"]

# Han (CJK unified + ext. A + compatibility), Hiragana, Katakana.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RE = re.compile(f"[{_CJK}]")
_TOKEN_RE = re.compile(f"[{_CJK}]|[^\\W_{_CJK}]+")
#: words for counting: as tokens, but a contraction ("don't") stays one word
_WORD_RE = re.compile(f"[{_CJK}]|[^\\W_{_CJK}]+(?:['’][^\\W_{_CJK}]+)*")
ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


class PRF(NamedTuple):
    precision: float
    recall: float
    f1: float


def detect_lang(text: str) -> str:
    """``zh`` when the text holds any Han/kana character, else ``en``."""
    return "zh" if _CJK_RE.search(text) else "en"


def resolve_lang(lang: Lang | str | None, *texts: str) -> str:
    """An explicit ``zh``/``en`` wins; ``auto``/None detects over all the texts."""
    if lang in ("zh", "en"):
        return str(lang)
    if lang not in (None, "auto"):
        raise ValueError(f"lang must be 'auto', 'zh' or 'en', not {lang!r}")
    return "zh" if any(_CJK_RE.search(t) for t in texts) else "en"


@lru_cache(maxsize=1)
def _porter():
    """nltk's Porter stemmer in its default mode (``NLTK_EXTENSIONS``), as rouge-score
    builds it: "used" -> "use", "days" -> "day" (the original algorithm gives "us", "dai")."""
    from nltk.stem import porter

    return porter.PorterStemmer()


def tokenize(text: str, *, stem: bool = False) -> list[str]:
    """Lower-cased tokens: one per CJK character, one per letter/digit run otherwise.

    ``stem``: Porter-stem tokens longer than 3 characters (what rouge-score does for
    English; CJK characters are never changed)."""
    toks = _TOKEN_RE.findall(text.lower())
    if stem:
        stemmer = _porter()
        toks = [stemmer.stem(t) if len(t) > 3 and not _CJK_RE.match(t) else t for t in toks]
    return toks


def words(text: str) -> list[str]:
    """Lower-cased words for counting: one per CJK character, letter/digit runs otherwise,
    a contraction ("don't") kept whole."""
    return _WORD_RE.findall(text.lower())


def word_count(text: str) -> int:
    """Words of :func:`words` (a Chinese character counts as one word)."""
    return len(_WORD_RE.findall(text))


def clip_words(text: str, max_words: int, marker: str = " ...") -> str:
    """The text up to its ``max_words``-th word (:func:`words`, so a Chinese character is
    a word), original spelling kept, ``marker`` appended when something was cut."""
    text = text.strip()
    for n, m in enumerate(_WORD_RE.finditer(text), start=1):
        if n == max_words:
            rest = text[m.end():]
            return text if not _WORD_RE.search(rest) else text[:m.end()] + marker
    return text


class _CharTokenizer:
    """Adapter of :func:`tokenize` for ``rouge_score.RougeScorer(tokenizer=...)`` (Chinese)."""

    def tokenize(self, text: str) -> list[str]:
        return tokenize(text)


@lru_cache(maxsize=4)
def _rouge_tokenizer(lang: str, stem: bool):
    """English: rouge-score's own tokeniser (and stemmer); Chinese: one token a character."""
    from rouge_score import tokenizers

    return tokenizers.DefaultTokenizer(use_stemmer=stem) if lang == "en" else _CharTokenizer()


@lru_cache(maxsize=4)
def _rouge_scorer(lang: str, stem: bool):
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), tokenizer=_rouge_tokenizer(lang, stem))


def rouge(reference: str, prediction: str, *, lang: Lang | str | None = "auto",
          stem: bool = True) -> dict[str, PRF]:
    """ROUGE-1/2/L/Lsum precision, recall, F1 of ``prediction`` against ``reference``.

    ROUGE-Lsum splits both texts on newlines (summary-level LCS). English scores equal
    ``rouge_score.RougeScorer(use_stemmer=stem)``'s; ``stem`` applies to English only (a
    detected or given ``zh`` text is never stemmed)."""
    zero = PRF(0.0, 0.0, 0.0)
    resolved = resolve_lang(lang, reference, prediction)
    use_stem = stem and resolved == "en"
    tok = _rouge_tokenizer(resolved, use_stem)
    if not tok.tokenize(reference) or not tok.tokenize(prediction):
        return {k: zero for k in ROUGE_TYPES}
    scores = _rouge_scorer(resolved, use_stem).score(reference, prediction)
    return {k: PRF(float(v.precision), float(v.recall), float(v.fmeasure))
            for k, v in scores.items()}


def bleu_tokenizer(lang: str) -> str:
    """The sacrebleu tokeniser of a language: ``zh`` for Chinese, ``13a`` otherwise."""
    return "zh" if lang == "zh" else "13a"


@lru_cache(maxsize=8)
def _bleu(tokenizer: str, smooth: str, max_n: int):
    from sacrebleu.metrics import BLEU

    return BLEU(tokenize=tokenizer, smooth_method=smooth, effective_order=True,
                max_ngram_order=max_n)


def bleu(references: Sequence[str], prediction: str, *, lang: Lang | str | None = "auto",
         max_n: int = 4, smooth: str = "exp") -> float:
    """Sentence BLEU-``max_n`` (fraction) of one prediction against one or more references."""
    refs = [r for r in references if r.strip()]
    if not refs or not prediction.strip():
        return 0.0
    tok = bleu_tokenizer(resolve_lang(lang, prediction, *refs))
    return float(_bleu(tok, smooth, max_n).sentence_score(prediction, refs).score) / 100.0


def bleu4(reference: str, prediction: str, *, lang: Lang | str | None = "auto",
          smooth: str = "exp") -> float:
    """Sentence BLEU-4 (fraction) with sacrebleu's standard tokens (``13a`` / ``zh``)."""
    return bleu([reference], prediction, lang=lang, smooth=smooth)


def self_bleu(texts: Sequence[str], *, lang: Lang | str | None = "auto", max_n: int = 4,
              smooth: str = "exp", sample: int | None = None, seed: int = 0) -> float | None:
    """Texygen self-BLEU of a corpus: each text against all the others (None for < 2 texts).

    Exactly sacrebleu's multi-reference sentence BLEU of each text against the rest of the
    corpus, computed in one pass (each text is tokenised once; a hypothesis's n-gram
    clip is the largest count among the *other* texts, kept as the top two counts per
    n-gram), so a corpus of thousands of utterances takes seconds, not hours.
    ``sample``: score only that many hypotheses, drawn with ``seed`` (the references are
    always the whole rest of the corpus); None scores every text."""
    corpus = [t for t in texts if t.strip()]
    if len(corpus) < 2:
        return None
    scorer = _bleu(bleu_tokenizer(resolve_lang(lang, *corpus)), smooth, max_n)
    stats = [_ngram_counts(scorer.tokenizer(t.rstrip()).split(), max_n) for t in corpus]
    top = _top_two_counts([ng for ng, _ in stats])
    lengths = _Lengths([n for _, n in stats])
    idx = list(range(len(corpus)))
    if sample is not None and sample < len(idx):
        idx = sorted(random.Random(seed).sample(idx, sample))
    scores = []
    for i in idx:
        ngrams, hyp_len = stats[i]
        correct, total = [0] * max_n, [0] * max_n
        for (order, gram), count in ngrams.items():
            c1, owner, c2 = top[order, gram]
            total[order - 1] += count
            correct[order - 1] += min(count, c2 if owner == i else c1)
        ref_len = _closest_other_length(hyp_len, lengths, hyp_len)
        scores.append(scorer.compute_bleu(correct, total, hyp_len, ref_len, smooth_method=smooth,
                                          effective_order=True, max_ngram_order=max_n).score)
    return sum(scores) / len(scores) / 100.0


def _ngram_counts(tokens: list[str], max_n: int) -> tuple[Counter, int]:
    """Every 1..``max_n``-gram of a tokenised text, keyed (order, n-gram), with its count,
    and the text's length: what sacrebleu's BLEU counts for a segment."""
    from sacrebleu import extract_word_ngrams

    counts = Counter({(n, gram): c for n in range(1, max_n + 1)
                      for gram, c in extract_word_ngrams(tokens, n).items()})
    return counts, len(tokens)


def _top_two_counts(counters: Sequence) -> dict:
    """n-gram → (largest count, index of its text, second largest count)."""
    top: dict = {}
    for i, counter in enumerate(counters):
        for gram, c in counter.items():
            c1, owner, c2 = top.get(gram, (0, -1, 0))
            if c > c1:
                top[gram] = (c, i, c1)
            elif c > c2:
                top[gram] = (c1, owner, c)
    return top


def _closest_other_length(hyp_len: int, lengths: _Lengths, own: int) -> int:
    """sacrebleu's closest reference length (ties: the shorter) among the other texts:
    ``lengths`` holds every text's length once; ``own`` (the hypothesis's) is left out
    once."""
    def available(n: int) -> bool:
        return lengths.count[n] - (n == own) > 0

    pos = bisect.bisect_left(lengths.sorted, hyp_len)
    below = next((lengths.sorted[i] for i in range(pos - 1, -1, -1)
                  if available(lengths.sorted[i])), None)
    above = next((lengths.sorted[i] for i in range(pos, len(lengths.sorted))
                  if available(lengths.sorted[i])), None)
    if below is None:
        return above
    if above is None or hyp_len - below <= above - hyp_len:
        return below
    return above


class _Lengths:
    """Text lengths: their counts and the distinct values in order."""

    def __init__(self, lengths: Sequence[int]):
        self.count = Counter(lengths)
        self.sorted = sorted(self.count)
