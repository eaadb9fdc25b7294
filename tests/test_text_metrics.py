"""The shared text metrics against values worked out by hand (see each test's comment)."""

import math

import pytest

from medpref.metrics import text as tm


def test_tokenize_one_token_per_han_character_and_words_otherwise():
    assert tm.tokenize("我今天头痛 since Monday, 2 days") == [
        "我", "今", "天", "头", "痛", "since", "monday", "2", "days"]
    assert tm.tokenize("Days started", stem=True) == ["day", "start"]  # Porter, nltk default mode
    assert tm.detect_lang("头痛") == "zh" and tm.detect_lang("headache") == "en"
    assert tm.word_count("我头痛 a lot") == 5
    assert tm.words("Don't stop, it's 5 mg") == ["don't", "stop", "it's", "5", "mg"]


def test_clip_words_counts_a_chinese_character_as_a_word():
    assert tm.clip_words("one two three four", 2) == "one two ..."
    assert tm.clip_words("one two.", 2) == "one two."             # nothing cut: no marker
    assert tm.clip_words("我今天头很痛。", 3) == "我今天 ..."
    assert tm.clip_words("Take 5 mg, twice", 3) == "Take 5 mg ..."


def test_rouge_chinese_pair_at_character_level():
    # ref 我今天头痛 / hyp 今天头很痛: unigrams 4 of 5 both ways; bigrams {今天, 天头}
    # 2 of 4; LCS 今天头痛 = 4 -> P = R = F = 0.8 / 0.5 / 0.8.
    s = tm.rouge("我今天头痛", "今天头很痛")
    assert s["rouge1"] == pytest.approx(tm.PRF(0.8, 0.8, 0.8))
    assert s["rouge2"] == pytest.approx(tm.PRF(0.5, 0.5, 0.5))
    assert s["rougeL"] == pytest.approx(tm.PRF(0.8, 0.8, 0.8))


def test_rouge_english_pair_with_stemmed_word_tokens():
    # ref: the cough start two dai ago (6) / hyp: the cough start yesterday (4)
    # R1: 3 overlaps -> P 3/4, R 3/6, F 0.6; R2: {the cough, cough start} -> P 2/3, R 2/5,
    # F 0.5; LCS 3 -> as R1.
    s = tm.rouge("The cough started two days ago.", "The cough started yesterday.")
    assert s["rouge1"] == pytest.approx(tm.PRF(0.75, 0.5, 0.6))
    assert s["rouge2"] == pytest.approx(tm.PRF(2 / 3, 0.4, 0.5))
    assert s["rougeL"] == pytest.approx(tm.PRF(0.75, 0.5, 0.6))


def test_bleu4_chinese_pair_at_character_level():
    # p1 4/5, p2 2/4, p3 1/3 (今天头), p4 0/2 -> exp smoothing 1/(2*2); equal length BP 1.
    expected = (0.8 * 0.5 * (1 / 3) * 0.25) ** 0.25
    assert tm.bleu4("我今天头痛", "今天头很痛") == pytest.approx(expected, abs=1e-6)
    # every n-gram of the hypothesis matches; BP = exp(1 - 6/5)
    assert tm.bleu4("我今天头很痛", "今天头很痛") == pytest.approx(math.exp(-0.2), abs=1e-6)


def test_bleu4_english_pair_with_13a_tokens():
    # 13a: ref The cough started two days ago . (7) / hyp The cough started yesterday . (5)
    # p1 4/5 (the period is a token), p2 2/4, p3 1/3, p4 0/2 -> 1/4; BP exp(1 - 7/5).
    expected = math.exp(-0.4) * (0.8 * 0.5 * (1 / 3) * 0.25) ** 0.25
    got = tm.bleu4("The cough started two days ago.", "The cough started yesterday.")
    assert got == pytest.approx(expected, abs=1e-6)
    # 13a keeps case: "the" is not "The"
    assert tm.bleu4("The cough", "the cough") < tm.bleu4("The cough", "The cough")


def test_empty_sides_score_zero():
    assert tm.bleu4("", "x") == 0.0 and tm.rouge("...", "a")["rouge1"].f1 == 0.0


def test_self_bleu_is_across_the_corpus():
    # Three texts; "a b c d" against the other two: each of them contains it whole ->
    # BLEU 1 with BP 1 (closest ref length 4). The two others are each a superset of it,
    # so their n-grams are not all in the rest (identical-pair check below).
    assert tm.self_bleu(["a b c d", "a b c d"]) == pytest.approx(1.0)
    # two disjoint texts share nothing: 0 at every order -> smoothed but tiny
    low = tm.self_bleu(["a b c d", "e f g h"])
    assert low is not None and low < 0.1
    # corpus-wide: adding a copy of text 1 raises the self-BLEU of the whole corpus
    assert tm.self_bleu(["a b c d", "e f g h", "a b c d"]) > low
    assert tm.self_bleu(["only one"]) is None
    # Chinese corpus at character level
    assert tm.self_bleu(["头很痛", "头很痛"]) == pytest.approx(1.0)


def test_fast_self_bleu_equals_sacrebleu_multi_reference_bleu():
    """The one-pass self-BLEU is exactly the mean of each text vs all others."""
    corpus = ["the patient has a cough", "the patient has a fever and a cough",
              "take ibuprofen with food", "the cough started two days ago .",
              "a cough , a fever", "the patient has a cough", "我今天头痛"]
    slow = [tm.bleu(corpus[:i] + corpus[i + 1:], corpus[i], lang="zh")
            for i in range(len(corpus))]
    assert tm.self_bleu(corpus, lang="zh") == pytest.approx(sum(slow) / len(slow), abs=1e-12)
    en = corpus[:-1]
    slow = [tm.bleu(en[:i] + en[i + 1:], en[i]) for i in range(len(en))]
    assert tm.self_bleu(en) == pytest.approx(sum(slow) / len(slow), abs=1e-12)
    # a sample of hypotheses: the same per-text scores, averaged over the sample
    part = tm.self_bleu(en, sample=3, seed=1)
    assert min(slow) <= part <= max(slow)


def test_correlations_with_human_scores_on_a_chinese_set(tmp_path):
    """A Chinese set where more shared characters = higher human score: the character-level
    metrics rank it perfectly; none of the records scores 0 (the old [a-z0-9]+ tokens
    gave every record 0, so no correlation at all)."""
    import json

    from medpref.metrics.human import NGRAM_SCORERS, correlation_table, read_records, score_records

    ref = "布洛芬饭后服用每日三次"
    hyps = ["饭后服用", "布洛芬饭后服用", "布洛芬饭后服用每日", "布洛芬饭后服用每日三次"]
    path = tmp_path / "zh.jsonl"
    path.write_text("\n".join(json.dumps({"question": "怎么吃？", "reference": ref,
                                          "prediction": h, "human": {"acc": k, "cmp": k}},
                                         ensure_ascii=False)
                              for k, h in enumerate(hyps)) + "\n", encoding="utf-8")
    scores = score_records(read_records(path), NGRAM_SCORERS)
    table = correlation_table(scores, list(NGRAM_SCORERS)).set_index("metric")
    assert table.loc["ROUGE-1", "acc rho pooled"] == 100.0
    assert table.loc["BLEU-4", "cmp tau pooled"] == 100.0
    assert (table["zero_share"] == 0.0).all()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"reference": "x", "human": {"acc": 1}}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        read_records(bad)


def test_fast_self_bleu_equals_sacrebleu_on_random_corpora():
    import random

    rng = random.Random(5)
    vocab = "a b c d e f g h".split()
    for _ in range(3):
        corpus = [" ".join(rng.choices(vocab, k=rng.randint(1, 9))) for _ in range(25)]
        slow = [tm.bleu(corpus[:i] + corpus[i + 1:], corpus[i]) for i in range(len(corpus))]
        assert tm.self_bleu(corpus) == pytest.approx(sum(slow) / len(slow), abs=1e-12)


def test_self_bleu_pinned_and_on_public_sacrebleu_api():
    """Values of the self-BLEU that read sacrebleu's private ``_preprocess_segment`` and
    ``metrics.helpers`` (06c7d04), pinned: the public API (``BLEU.tokenizer``,
    ``sacrebleu.extract_word_ngrams``, ``BLEU.compute_bleu``) gives the same numbers."""
    import inspect
    import random

    rng = random.Random(7)
    vocab = ("the patient has a cough fever pain since two days ago , . ? take ibuprofen "
             "with food").split()
    en = [" ".join(rng.choices(vocab, k=rng.randint(1, 14))) for _ in range(60)]
    zh = ["我今天头痛", "头很痛，发烧两天", "请饭后服用布洛芬", "我今天头痛", "咳嗽三天了 cough",
          "发烧两天"]
    assert tm.self_bleu(en) == pytest.approx(0.3943692473242467, abs=1e-12)
    assert tm.self_bleu(en, sample=10, seed=3) == pytest.approx(0.5114027001243293, abs=1e-12)
    assert tm.self_bleu(zh) == pytest.approx(0.5404284505946709, abs=1e-12)
    assert tm.self_bleu(en, max_n=2, smooth="floor") == pytest.approx(0.8202620914811972,
                                                                      abs=1e-12)
    source = inspect.getsource(tm.self_bleu) + inspect.getsource(tm._ngram_counts)
    assert "._" not in source and "metrics.helpers" not in source


# Words whose Porter stem differs between nltk's ORIGINAL_ALGORITHM and its default
# NLTK_EXTENSIONS mode (checked by running both): rouge-score uses the default.
STEM_MODE_WORDS = {"used": "use", "uses": "use", "days": "day", "dying": "die",
                   "lying": "lie", "skies": "sky", "news": "news", "possibly": "possibl"}


def test_stemmer_is_rouge_scores_default_mode_not_the_original_algorithm():
    from nltk.stem import porter
    from rouge_score import tokenizers

    original = porter.PorterStemmer("ORIGINAL_ALGORITHM")
    rouge_tok = tokenizers.DefaultTokenizer(use_stemmer=True)
    for word, stem in STEM_MODE_WORDS.items():
        assert original.stem(word) != stem, word          # the modes really differ here
        assert tm.tokenize(word, stem=True) == [stem] == rouge_tok.tokenize(word), word
    # three letters or fewer are never stemmed (rouge-score's rule)
    assert tm.tokenize("was has", stem=True) == ["was", "has"]


@pytest.mark.parametrize(("reference", "prediction"), [
    # the modes score this pair differently: default used/dying -> use/die match the
    # unstemmed 3-letter "use"/"die"; the original algorithm gives us/dy (and news -> new)
    ("Patients use it; some may die of new flu.", "Patients used it and are dying; news."),
    ("The patient used an inhaler for two days.", "She uses inhalers daily; days of wheeze."),
    ("Dying cells were lying in the skies of news.", "The news: skies possibly clear."),
    ("Naïve T-cells and β-blockers (50 mg) used_daily.", "naive t cells, beta blockers used."),
    ("Line one of the summary.\nLine two used here.", "Line two uses it.\nAnd line one."),
])
def test_english_rouge_equals_rouge_score(reference, prediction):
    from rouge_score import rouge_scorer

    theirs = rouge_scorer.RougeScorer(list(tm.ROUGE_TYPES), use_stemmer=True).score(
        reference, prediction)
    ours = tm.rouge(reference, prediction)
    for key in tm.ROUGE_TYPES:
        assert ours[key] == pytest.approx(tm.PRF(*theirs[key]), abs=1e-12), key
    if reference.startswith("Patients use"):
        # ref 9 tokens, hyp 7; shared patient, use, it, die -> P 4/7, R 4/9, F 0.5
        # (the original algorithm shares patient, it, new -> F 0.375)
        assert ours["rouge1"] == pytest.approx(tm.PRF(4 / 7, 4 / 9, 0.5))
    unstemmed = rouge_scorer.RougeScorer(["rouge1"]).score(reference, prediction)["rouge1"]
    assert tm.rouge(reference, prediction, stem=False)["rouge1"] == pytest.approx(
        tm.PRF(*unstemmed), abs=1e-12)
