"""What the doctor said in its own words: content units, echoes and speech acts.

The SP grader must credit only the doctor's own contribution. A doctor sentence is an
*echo* when most of its content units were already said by the patient (the chief
complaint or a later patient turn) and it adds fewer than ``min_new`` new ones: "So you
have been thirsty all the time." repeats the complaint and cannot pass any item, while
"How much do you drink in a day?" can. Content units are Porter stems of English words
outside a small list of function and filler words, or Han character bigrams for
Chinese. Each sentence also gets a speech act (question, recommendation, decline,
statement) so the grader can ask the checklist's question of the right kind of
sentence: a symptom is asked about, a test is recommended, a disease is named.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

from medpref.contracts import Turn
from medpref.sentences import split_sentences

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_HAN_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")

# function words and conversational filler: they carry no clinical content, so sharing
# them with the patient is not an echo and saying them is not a contribution
_STOP = frozenset("""
a about above after again against ago all also am an and any anything are as at be
because been before being below between both but by can could did do does doing done
down during each else ever few for from further get gets getting got had has have
having he her here hers him his how i i'd i'll i'm i've if in into is it it's its
just let let's like ll me might more most much must my no nor not now of off ok okay
on once only or other our out over own please re really right s same see she should
so some something such sure t tell than thank thanks that that's the their them then
there these they this those through to too under understand until up us very ve was
we well were what when where whether which while who whom why will with would yes yet
you you're you've your yours sorry hear heard glad mention mentioned said say saying
says told feel feeling felt think kind bit lot little describe describing go going
one today patient doctor glad welcome help happy nice meet hello hi
""".split())

# Chinese question frame and function characters: no clinical content
ZH_QUESTION_FRAME = re.compile(r"请问|你|您|我|的|了|吗|呢|吧|啊|有没有|是不是|是否|什么|怎么|怎样|"
                       r"多久|多少|哪里|哪儿|一下|一些|这个|那个|现在|最近|平时")

_QUESTION_START = re.compile(
    r"^\s*(?:so\s+|and\s+|also\s+|now\s+|okay\s*,?\s+|ok\s*,?\s+)?(?:how|what|when|where|"
    r"which|who|why|do|does|did|have|has|had|are|is|was|were|can|could|would|will|any|"
    r"tell me|describe|please (?:tell|describe))\b", re.IGNORECASE)
_RECOMMEND = re.compile(
    r"\b(?:i(?:'d| would)(?: still| also)? like (?:to|you to|a|an|some|the|your|him|her|them|"
    r"that|[\w-]+ (?:tests?|scans?|samples?|levels?|counts?))\b|"
    r"(?:we|i)(?:'ll| will) (?:do|get|run|order|check|arrange|take|measure|test|send|book|"
    r"dip|refer|weigh)\b|so (?:we|i) can (?:check|test|measure|see|look)\b|"
    r"let's (?:go through|look|see)\b|i (?:recommend|suggest|advise|want to order|"
    r"will order|'ll order)|i'll (?:order|arrange|request|send|check)|we (?:should|need to|"
    r"will|'ll|can) (?:do|get|run|order|check|arrange|take|measure|test|start)|let's "
    r"(?:do|get|run|order|check|arrange|take|measure|test|weigh|send|use|complete)|"
    r"let me (?:look|check|examine|listen|feel|take|measure|weigh|test)\b|"
    r"\b(?:we|you)(?:'ll| will)? need (?:a|an|some|the|your|right away|now|urgently)\b|"
    r"you (?:should|need to|will need "
    r"to) (?:have|get|do|take)|(?:recommend|suggest|order|arrange|request)(?:ing)? (?:a|an|"
    r"some|the)\b)", re.IGNORECASE)
# an elliptical request that continues the plan: "And a urine test." "And blood tests, a
# full blood count and CRP." (no verb of its own: "And the X-ray was normal." reports)
_ELLIPTICAL_REQUEST = re.compile(r"^\s*(?:and|also|plus)\s+[\w\s,'-]{1,80}[.!]?\s*$",
                                 re.IGNORECASE)
_FINITE_VERB = re.compile(r"\b(?:is|was|were|are|am|has|had|have|does|did|do|shows?|showed|"
                          r"came|comes|looks?|looked|seems?|seemed|went|goes|feels?|felt)\b",
                          re.IGNORECASE)
_IMPERATIVE = re.compile(r"^\s*(?:please\s+|so\s+|then\s+)?(?:get|have|do|take|go for|book|"
                         r"arrange|start)\s+(?:a|an|some|the|your|a few)?\s*\w", re.IGNORECASE)
_DECLINE = re.compile(
    r"\b(?:no need|(?:don't|do not|doesn't|does not|won't|will not) need|not (?:necessary|"
    r"needed|required)|isn't (?:necessary|needed|required)|unnecessary)\b", re.IGNORECASE)
_PAST = re.compile(r"\b(?:i (?:asked|already asked)|you (?:told|said|mentioned)|as you "
                   r"(?:said|mentioned)|we (?:discussed|talked))\b", re.IGNORECASE)
_ZH_QUESTION = re.compile(r"[?？]\s*$|吗|呢\s*[。？?]?\s*$|有没有|是否|是不是|什么|多久|多少|"
                          r"怎么|哪里|哪儿|几次|几天|请描述|说说")
_ZH_RECOMMEND = re.compile(r"建议|需要(?:做|查|检查|化验|拍)|安排|开(?:个|一)|做(?:个|一个|一下)|"
                           r"查(?:一下|个)|检查一下|去(?:做|查|拍)|我们(?:来|要)(?:做|查|测)")
_ZH_DECLINE = re.compile(r"不需要|没必要|不用(?:做|查)|不必")
_ZH_PAST = re.compile(r"我(?:已经)?问过|你(?:刚才)?说过|您(?:刚才)?说过|刚才说")


_ITEM_SPLIT = re.compile(r",|;|/|\(|\)|\bor\b|\band\b|、|，|；|或")


# the frame of a Chinese checklist item (CSPT's items are sentences of the shape "did the
# doctor learn whether the patient has …", "did the doctor ask the … history", "…, such as
# X, Y"): it says that the doctor should ask, not what about; matched against what the
# doctor said, it would only miss
ZH_ITEM_FRAME = re.compile(r"是否|了解了?|询[问间]过?|患者|病人|患儿|有无|情况|的描述|"
                           r"描述|表现|如：|如|等|相关|史")
# characters that carry no clinical content in a question (the question frame's pieces and
# the commonest function characters): a doctor's "有痰吗？" asks about 痰
_ZH_STOP_CHARS = frozenset("有没是否的了吗呢吧啊么什怎样你您我他她它这那在和或者与及"
                           "一下个些过还都就也很请问可以能会要")
# where a Chinese question lists what it asks: "有没有头晕、心慌或者乏力？" asks three things
_ZH_CLAUSE = re.compile(r"[、，,；;：:]|或者|还是|或")


def zh_chars(text: str) -> frozenset[str]:
    """The Han characters of a text that carry content (function characters left out)."""
    return frozenset(_HAN.findall(text)) - _ZH_STOP_CHARS


def zh_item_parts(item: str) -> list[frozenset[str]]:
    """A Chinese checklist item as the content characters of each of its parts, the item's
    frame removed (:data:`ZH_ITEM_FRAME`): "是否了解患者有无流涕、咳痰。" gives {流, 涕, 咳, 痰},
    {流, 涕} and {咳, 痰}."""
    core = ZH_ITEM_FRAME.sub(" ", item)
    parts = [zh_chars(p) for p in [core, *_ITEM_SPLIT.split(core)]]
    return list(dict.fromkeys(p for p in parts if p))


def zh_share(part: frozenset[str], sentence: str) -> float:
    """How well a Chinese doctor sentence asks one item part: the share of the part's
    characters the sentence holds, or the Dice overlap of the part with the sentence's
    best clause (a short question, "有痰吗？", asks about 咳痰 with one of its two
    characters), whichever is more."""
    have = zh_chars(sentence)
    share = len(part & have) / len(part)
    clauses = [zh_chars(c) for c in _ZH_CLAUSE.split(sentence)]
    dice = max((2 * len(part & c) / (len(part) + len(c)) for c in clauses if c), default=0.0)
    return max(share, dice)


def item_parts(item: str) -> list[str]:
    """A checklist item and, for a compound one ("jaundice, dark urine or pale stools"),
    each part with content of its own: asking about one part asks about the item."""
    parts = [p.strip() for p in _ITEM_SPLIT.split(item) if p.strip()]
    return list(dict.fromkeys([item, *[p for p in parts if content_units(p)]]))


# words that qualify a disease without naming it: a sentence sharing only these with a
# checklist disease ("right lower lobe", "acute") has not named that disease. Besides
# laterality, severity and acuity: the site or organ ("uterine contractions" is not
# uterine fibroids, "the ovary" not polycystic ovary syndrome), a state beside the
# disease ("dehydration"), and the class words any disease shares ("disorder",
# "syndrome", "deficiency", "disease"). Not "iron" nor "pregnancy": the hand-graded items
# credit plain words ("you're anaemic because your iron stores are very low"; "the
# pregnancy is growing in your left tube"), which then pass through those units alone
_DISEASE_MODIFIERS = frozenset("""
acute chronic left right upper lower bilateral unilateral lobe mild moderate severe early
late primary secondary recurrent suspected possible probable type stage grade episode
major minor childhood allergic tubal community acquired
uterine ovary ovarian inguinal indirect media calculous dehydration
generalized generalised disease diseases syndrome disorder disorders deficiency
""".split())

# a negation cue in the few words before the disease: "no signs of asthma", "ruled out
# pneumonia", "it isn't appendicitis" do not name it as the diagnosis
_NEGATION_CUES = frozenset("""
no not without never nor denies deny denied unlikely negative excluded isn't aren't
wasn't weren't doesn't don't didn't
""".split())
_NEGATION_PHRASES = re.compile(r"\bruled? out\b|\brules out\b|\bfree of\b", re.IGNORECASE)
_NOT_A_NEGATION = re.compile(r"\bnot (?:just|only)\b", re.IGNORECASE)   # "not just hernia": more
NEGATION_WINDOW = 5

# a history cue just before the disease: "he had asthma attacks while sleeping", "who has
# been diagnosed with asthma since he was 12" state a past event, not the diagnosis the
# doctor reaches now
_HISTORY_CUES = frozenset({"had", "diagnosed"})
HISTORY_WINDOW = 3

# how a doctor offers a disease as this patient's diagnosis: "this could be due to …",
# "it sounds like …", "you have …", "she most likely has …", "I think …", "yellow phlegm
# may indicate …", or a finding in the patient's body ("…growing in your left tube"). An English
# sentence without such a frame mentions a disease in teaching text or in passing ("These
# illnesses include … other kinds involving pneumonia"; "…could lead to more complicated
# conditions not just hernia"), which does not name it as the diagnosis
_DIAGNOSIS_FRAME = re.compile(
    r"\b(?:this|that|it)(?:'s| is| was| could| can| may| might| would| will| sounds| "
    r"seems| looks| means| indicates| suggests)\b|"
    r"\b(?:could|can|might|may|is|would) (?:it|this|that) be\b|"
    r"\b(?:may|might|could|can|would) (?:indicate|suggest|mean|point to)\b|"
    r"\bin your\b|\byour (?:left |right )?[a-z]+ (?:is|are|has|shows?)\b|"
    r"\b(?:you|he|she|they|we)(?:'re| are| is|'ve| have| has|'s)\b|"
    r"\b(?:most likely|probably|likely|possibly|i think|i suspect|i believe|diagnosis|"
    r"sounds? like|looks? like|seems? like|suffers? from|suffering from|due to|caused by|"
    r"consistent with|points? to|worry is)\b", re.IGNORECASE)

# a question about the patient's history or state ("Do you have …?", "Have you ever had
# …?", "Has she been …?", "有没有…？", "得过…吗？") asks whether a condition is present; a
# disease named inside it is not offered as the diagnosis ("Could this be …?" is)
_HISTORY_QUESTION = re.compile(
    r"^\s*(?:and\s+|also\s+|so\s+)?(?:do|does|did|have|has|had|are|is|were|was)\s+"
    r"(?:you|he|she|they|your\s+\w+|the\s+patient|anyone)\b"
    r"(?!\s+(?:think|know|suppose|agree|understand|realise|realize)\b)", re.IGNORECASE)
_ZH_HISTORY_QUESTION = re.compile(r"有没有|有无|是否有|得过|患过|有过")


def asks_history(sentence: str) -> bool:
    """The sentence asks whether the patient has or had something (a history question)."""
    s = sentence.strip()
    if is_chinese(s):
        return bool(_ZH_HISTORY_QUESTION.search(s)) and speech_act(s) == "question"
    return bool(_HISTORY_QUESTION.match(s))


# disease-shaped words: a sentence holding many of these is a list of candidates even
# when nothing separates them ("pancreatitis bronchitis gastroenteritis anemia ...")
_DISEASE_WORD = re.compile(
    r"\b[a-z]+(?:itis|osis|oses|a?emia|omas?|pathy|iasis|ism)\b|"
    r"\b(?:syndrome|disease|infection|cancer|failure|disorder|deficiency|tumou?r)s?\b",
    re.IGNORECASE)
_NOT_DISEASES = frozenset("""
diagnosis diagnoses prognosis prognoses mechanism mechanisms organism organisms aroma
diploma academia stoma
""".split())


@cache
def disease_core(item: str) -> frozenset[str]:
    """The units that name a checklist disease: those of the item and its parts, less the
    modifiers (laterality, site, severity, acuity)."""
    modifiers = content_units(" ".join(_DISEASE_MODIFIERS))
    return frozenset(u for part in item_parts(item) for u in content_units(part)) - modifiers


def names_disease(sentence: str, item: str) -> bool:
    """The sentence names the disease: it shares a unit of :func:`disease_core` with it, and
    (English) some such mention has no negation cue in the ``NEGATION_WINDOW`` words before
    it and no history cue ("had", "diagnosed") in the ``HISTORY_WINDOW`` words before it,
    in a sentence that offers a diagnosis (``_DIAGNOSIS_FRAME``: "this could be…", "you
    have…", "most likely…"; teaching text and talk in passing do not). A sentence only
    about the same organ or topic ("the eardrums" for otitis media) does not name it,
    whatever its cosine. A history question ("Do you have …?", :func:`asks_history`) names
    no diagnosis."""
    core = disease_core(item)
    if not core & content_units(sentence) or asks_history(sentence):
        return False
    if is_chinese(sentence):
        return True
    if not _DIAGNOSIS_FRAME.search(sentence.replace("\u2019", "'")):
        return False
    stem = _stemmer().stem
    text = sentence.lower().replace("\u2019", "'")          # "doesn’t" as "doesn't"
    text = _NEGATION_PHRASES.sub(" not ", _NOT_A_NEGATION.sub(" also ", text))
    words = _WORD.findall(text)
    hits = [i for i, w in enumerate(words) if w not in _STOP and stem(w) in core]
    if not hits:        # a unit shared through a Chinese run or a digit-free token split
        return True
    return any(not _NEGATION_CUES & set(words[max(0, i - NEGATION_WINDOW):i])
               and not _HISTORY_CUES & set(words[max(0, i - HISTORY_WINDOW):i]) for i in hits)


def disease_words(sentence: str) -> int:
    """How many distinct disease-shaped words (-itis, -osis, -emia, -oma, ..., "syndrome",
    "cancer") the sentence holds."""
    found = {m.group(0).lower() for m in _DISEASE_WORD.finditer(sentence)}
    return len(found - _NOT_DISEASES)


# where a list breaks: commas, semicolons, slashes, "and", "or" and their Chinese marks
_LIST_BREAK = re.compile(r",|;|/|\bor\b|\band\b|、|，|；|或者|或")


def list_pieces(sentence: str) -> int:
    """The pieces of the sentence's list that carry clinical content of their own (a
    lead-in such as "From what you've told me," carries none): "Do you have fever,
    cough or chest pain?" has 3."""
    return sum(1 for piece in _LIST_BREAK.split(sentence) if content_units(piece))


def listed_candidates(sentence: str, matched_items: int, act: str) -> int:
    """How many candidates one doctor sentence names at once: the checklist items of the
    case it names by their words and would earn, in any category (``matched_items``), or
    its list pieces, whichever is more. A recommendation is counted by its items only: an
    order for one blood draw is written as a list ("blood tests, a blood count, liver
    tests and lipase") and names three checklist tests, not four candidates."""
    pieces = 0 if act == "recommendation" else list_pieces(sentence)
    return max(matched_items, pieces)


def lists_too_many(sentence: str, matched_items: int, act: str, max_candidates: int) -> bool:
    """PLPF Eq. 6's rule (a turn naming four or more candidate diseases fails) extended
    to every category: a sentence naming ``max_candidates`` or more candidates is a list,
    not a question, and earns nothing."""
    return listed_candidates(sentence, matched_items, act) >= max_candidates


# a question about someone other than the patient: its subject, right after the
# auxiliary that opens it, is anyone, someone, other people or the doctor ("Does anyone
# have diabetes…?", "Do other children have eczema…?", "Have I had any stomach
# problems?"). It asks nothing of this patient, unless it speaks of the patient ("you",
# "your": "Has anyone said your skin looks yellow?") or of the patient's family, home or
# contacts ("Does anyone in the family have asthma?", "Has anyone around him been ill?",
# "Does anyone smoke at home?"), which is history the checklist asks for
_OTHER_SUBJECT = re.compile(
    r"^\s*(?:so\s+|and\s+)?(?:does|do|did|has|have|had|is|are|"
    r"was|were|can|could|would|will)\s+(?:anyone|anybody|someone|somebody|"
    r"(?:any\s+)?other\s+(?:people|children|kids|persons?|patients|women|men)|i)\b",
    re.IGNORECASE)
_OWN_CIRCLE = re.compile(
    r"\b(?:family|families|relatives?|mother|father|mum|mom|dad|parents?|siblings?|brothers?|"
    r"sisters?|home|household|around (?:you|him|her|them)|contact|close to (?:you|him|her)|"
    r"friends?|school|nursery|work|you|your)\b", re.IGNORECASE)


def about_someone_else(sentence: str) -> bool:
    """The sentence, opening with an auxiliary, asks about someone other than the patient
    and the patient's family, home or contacts (English; a Chinese sentence is never
    refused by this rule)."""
    s = sentence.replace("\u2019", "'")
    return bool(_OTHER_SUBJECT.search(s)) and not _OWN_CIRCLE.search(s)


def is_chinese(text: str) -> bool:
    return len(_HAN.findall(text)) >= max(1, len(text.strip()) // 4)


@lru_cache(maxsize=1)
def _stemmer():
    from nltk.stem.porter import PorterStemmer

    return PorterStemmer()


def content_units(text: str) -> frozenset[str]:
    """The sentence's clinical content: English stems outside the stop list, Chinese
    character bigrams (single characters for a one-character run) outside the question
    frame."""
    units: set[str] = set()
    for run in _HAN_RUN.findall(ZH_QUESTION_FRAME.sub(" ", text)):
        units.update(run[i:i + 2] for i in range(max(1, len(run) - 1)))
    stem = _stemmer().stem
    units.update(stem(w) for w in _WORD.findall(_HAN_RUN.sub(" ", text.lower()))
                 if w not in _STOP and not w.isdigit())
    return frozenset(units)


def named_in_complaint(item: str, complaint: str) -> bool:
    """The opening complaint already names the item: every content unit of the item is
    in it. Asking "Any double vision?" of a patient who opened with "Double vision" only
    repeats the patient, which earns nothing."""
    units = content_units(item)
    return bool(units) and units <= content_units(complaint)


def overlap_share(units: frozenset[str], said: frozenset[str] | set[str]) -> float:
    """Share of a sentence's units already said (1.0 for a sentence without content)."""
    return 1.0 if not units else len(units & said) / len(units)


def speech_act(sentence: str) -> str:
    """question | recommendation | decline | statement, from the sentence's form.
    A sentence that reports an earlier question ("I asked about ...") is a statement."""
    s = sentence.strip()
    if is_chinese(s):
        if _ZH_PAST.search(s):
            return "statement"
        if _ZH_DECLINE.search(s):
            return "decline"
        if _ZH_RECOMMEND.search(s):
            return "recommendation"
        return "question" if _ZH_QUESTION.search(s) else "statement"
    if _PAST.search(s) and not s.endswith("?"):
        return "statement"
    if _DECLINE.search(s):
        return "decline"
    if _RECOMMEND.search(s) or (_IMPERATIVE.match(s) and not s.endswith("?")):
        return "recommendation"
    if _ELLIPTICAL_REQUEST.match(s) and not _FINITE_VERB.search(s):
        return "recommendation"
    if s.endswith(("?", "？")) or _QUESTION_START.match(s):
        return "question"
    return "statement"


@dataclass(frozen=True)
class DoctorSentence:
    """One sentence of a doctor turn, with what the grader needs to know about it."""

    turn: int            # index of its turn in the transcript
    text: str
    act: str
    echo: bool
    overlap: float       # share of its content units the patient had already said
    new_units: int       # content units the patient had not said


def doctor_sentences(turns: Sequence[Turn], echo_overlap: float = 0.6, min_new: int = 1
                     ) -> list[DoctorSentence]:
    """Every doctor sentence in order, each checked against what the patient had said
    before it. An echo: at least ``echo_overlap`` of its units said already and fewer
    than ``min_new`` new units; a question needs only one new unit to be the doctor's own
    ("How high has the fever been?" asks something the patient has not said)."""
    said: set[str] = set()
    out = []
    for i, t in enumerate(turns):
        if t.role == "patient":
            said |= content_units(t.text)
            continue
        for s in split_sentences(t.text):
            units = content_units(s)
            new = len(units - said)
            share = overlap_share(units, said)
            act = speech_act(s)
            needs = 1 if act == "question" else min_new
            echo = bool(units) and share >= echo_overlap and new < needs
            out.append(DoctorSentence(i, s, act, echo, round(share, 3), new))
    return out
