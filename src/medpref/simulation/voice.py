"""The patient's voice: a case's text as what a patient would say, and a check of it.

Case sources write the patient's information in other voices: AgentClinic's NEJM files
as an actor's brief in the second person with markdown and field labels ("For your role
as a patient, you are a 55-year-old woman who has noticed your skin darkening ...",
"- **Symptoms**: - You've been ..."), its MedQA files and the embedded cases as a
clinician's record in the third person ("The patient reports ...", "For about two months
he has been very thirsty"), CSPT as a Chinese record ("病人平素月经规律", "月经史：...").
A patient that answers with those sentences verbatim reads its brief aloud.

:func:`patient_facts` turns a case's information sections into the patient's knowledge,
deterministically, before any consultation: markdown and bullets become line breaks,
actor instructions are dropped ("Remember, you are not aware of your diagnosis"), field
labels are stripped ("Past medical history: none" -> "None"), the second and third
person become the first (``first_person``), and every sentence that reports an
examination or test result (:func:`reports_result`), wherever the source put it, goes to
the findings, which the patient gives only when a test or examination is asked for. A
case answered by a family informant (CSPT's pediatric cases, an embedded child case
whose mother answers) keeps the third person for the patient: that is how the informant
speaks of them.

:func:`voice_faults` is the check, run on what the patient said: second person (or an
actor instruction), a field label, markdown, the third person where the patient speaks
for themself, a result nobody asked for (:func:`asks_for_test`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from medpref.contracts import SPCase
from medpref.echo import is_chinese, speech_act
from medpref.sentences import split_sentences

# ------------------------------------------------------------------ what the check finds

_SECOND = re.compile(r"\b(?:you|your|yours|yourself|you've|you're|you'll|you'd)\b|"
                     r"\b(?:patient actor|your role|role as an? patient)\b", re.IGNORECASE)
_ACTOR_ZH = re.compile(r"扮演|你的角色|[你您]是(?:一[名位个])?患者")
_THIRD = re.compile(r"\b(?:the patient|patient's|patient (?:reports|denies|notes|states|"
                    r"describes|has|is|was))\b|^(?:patient|pt)\b|病人|患者|病员",
                    re.IGNORECASE)
_PRONOUN = re.compile(r"\b(?:he|she|his|him|himself|herself)\b", re.IGNORECASE)
#: someone else the sentence is about: then "he" or "she" is that person, not the patient
_OTHER_PERSON = re.compile(
    r"\b(?:mum|mom|mother|dad|father|parents?|wife|husband|partner|son|daughter|brother|"
    r"sister|friend|grand\w+|child(?:ren)?|baby|boss|colleague|doctor|nurse|aunt|uncle|"
    r"cousin|neighbou?r|family|boyfriend|girlfriend|man|woman|someone|everyone)\b",
    re.IGNORECASE)
#: a word before a colon that is the patient's own lead-in, not a field label
_NOT_A_LABEL = re.compile(r"^\s*(?:everything|nothing|yes|no|well|both|so|anyway|honestly|"
                          r"actually|mostly|only|just|once|twice|sometimes|usually)\s*:",
                          re.IGNORECASE)
#: a label may hold a colon with no space after it ("FEV1:FVC Ratio: 62%")
_LABEL_EN = r"(?:[A-Z]|[a-z]{1,2}[A-Z])(?:[A-Za-z0-9'’/&(),. +-]|:(?=\S)){0,78}?"
_FIELD_LABEL = re.compile(rf"^\s*(?:[-*•]\s*|\d{{1,2}}[.)]\s+)?\**{_LABEL_EN}\**\s*:\s*(?=\S)|"
                          r"^\s*[\u4e00-\u9fff]{2,8}[：:]\s*(?=\S)")
#: CSPT masks names with asterisks ("我叫**", "唐**"): not markdown
_HAN_MASK = re.compile(r"(?<=[\u4e00-\u9fff\s])\*{2,3}(?=[\s，,。\u4e00-\u9fff]|$)")
_MARKDOWN = re.compile(r"(?<!\*)\*\*(?!\*)|__|^\s*#|(?:^|\s)[-*•]\s+[A-Z*]|"
                       r"^\s*\d{1,2}\.\s+[A-Z*]")

# an examination or test, and a word that reports what it found
_TEST_NOUN = (r"tests?|biops(?:y|ies)|scans?|ct|mri|x-?rays?|radiograph\w*|ultrasound\w*|"
              r"ecg|ekg|electrocardiogra\w*|cultures?|counts?|levels?|stain\w*|exam\w*|"
              r"laborator\w*|labs?|urinalysis|\w+scop(?:y|ic)|\w+graph(?:y|ic)|readings?|"
              r"blood pressure|temperature|pulse|vital signs?|heart rate|respiratory rate|"
              r"otoscopy|auscultat\w*|palpat\w*|microscop\w*|serum|plasma|antibod\w*|"
              r"titers?|titres?|hba1c|glucose|haemoglobin|hemoglobin|bmi|saturation|"
              r"score|specimen|histolog\w*|patholog\w*|fundoscopy|dipstick")
_FOUND = (r"show(?:s|ed|n)?|reveal(?:s|ed)?|found|noted|positive|negative|normal|"
          r"abnormal|elevated|detected|consistent with|indicat(?:ed|es|ing)|measured|"
          r"confirm(?:s|ed)|demonstrat(?:ed|es)|\d+(?:\.\d+)?\s*(?:%|mm\b|mmhg|mg/d?l|"
          r"g/d?l|u/l|iu\b|mmol|µ|per\b|/min|bpm|°|x\s*10)")
_RESULT_EN = re.compile(rf"\b(?:{_TEST_NOUN})\b.*\b(?:{_FOUND})|\b(?:{_FOUND})\b.*"
                        rf"\b(?:{_TEST_NOUN})\b", re.IGNORECASE)
_RESULT_ZH = re.compile(r"(?:检查|化验|查血|血常规|尿常规|B超|彩超|超声|CT|MRI|核磁|X线|胸片|"
                        r"心电图|胃镜|肠镜|HCG|血压|体温|脉搏|心率|查体|听诊|检测|测得|示|提示|显示)"
                        r".*(?:示|提示|显示|阴性|阳性|正常|异常|升高|降低|增高|偏高|偏低|\d)")
# a doctor sentence that asks for a test or an examination (or for results already had)
_ASK_TEST_EN = re.compile(rf"\b(?:{_TEST_NOUN}|check|examine|measure|listen|look at|"
                          r"feel your|results?|investigations?|work-?up|blood|urine|swab|"
                          r"pressure|records?|reports?|notes)\b", re.IGNORECASE)
_ASK_TEST_ZH = re.compile(r"检查|化验|查|测|拍|听诊|量|结果|B超|彩超|CT|片子|病历|报告|单子|资料|"
                          r"血压|血糖|体温|心率")
# a Chinese request to see the records ("您把病历给我看一下吧"), which reads as a statement
_ZH_SHOW = re.compile(r"给我看|让我看|拿给我|拿来看")


_HAN = re.compile(r"[\u4e00-\u9fff]")
#: information sections that hold findings: given only after a test or examination is asked for
FINDINGS_SECTION = re.compile(r"exam|test|investigation|result|lab|mental state|"
                              r"检查|化验|结果|体格|资料", re.IGNORECASE)


def _sentences(line: str) -> list[str]:
    """A line's sentences; Chinese text is cut at its own marks only (CSPT writes
    decimals as "3. 7cm", which an English cut would break)."""
    if _HAN.search(line):
        return split_sentences(line, western=False)
    return split_sentences(line)


def reports_result(sentence: str) -> bool:
    """Whether a sentence reports what an examination or test found ("Skin biopsy showed
    necrobiosis", "Blood pressure 148/92 mmHg", "查血 HCG: 1557 IU/L")."""
    zh = bool(_HAN.search(sentence)) and bool(_RESULT_ZH.search(sentence))
    return zh or bool(_RESULT_EN.search(sentence))


def asks_for_test(doctor_turn: str) -> bool:
    """Whether a doctor turn asks for an examination, a test, or results already had."""
    for s in split_sentences(doctor_turn or ""):
        zh = is_chinese(s)
        asks = speech_act(s) in ("question", "recommendation") or (zh and _ZH_SHOW.search(s))
        if asks and (_ASK_TEST_ZH if zh else _ASK_TEST_EN).search(s):
            return True
    return False


#: the faults :func:`voice_faults` names, in the order the reports give them
FAULTS = ("second_person", "field_label", "markdown", "third_person", "unrequested_result",
          "instruction", "stage_direction")

#: an actor's or a record's instruction or note, not something a patient says ("Mention
#: that I have a cough", "Imagine the pain ...", "not specified in this scenario")
_META = re.compile(
    r"^(?:mention|make sure|be sure|portray|express|act as|describe to the doctor)\b|"
    r"\bimagine\b|\b(?:this|the) (?:scenario|case (?:text|description)|brief)\b|"
    r"\bpatient actor\b|\b(?:not|isn't|is not|wasn't|was not) (?:detailed|specified|provided|"
    r"mentioned|given|stated|described|available|included) in (?:the|this|my) "
    r"(?:scenario|case|text|information|record|report|brief|notes?)\b", re.IGNORECASE)
#: a stage direction in brackets, one that describes the speaker's body or manner
#: ("（手捂下腹部）", "（面带笑容）", "(sighs)", "(points to the chest)"), not a drug's name
#: or a grade in brackets ("（格列齐特）", "（洛杉矶分级A级）")
_STAGE = re.compile(r"[（(][^（）()]*(?:手|指向|指着|面带|表情|面容|讲话|言语|声音|体位|拿出|"
                    r"捂|按着|哭|笑|叹|停顿|点头|摇头|皱眉|咳)[^（）()]*[）)]|\((?:[^()]*\b(?:sighs?|"
                    r"pauses?|points?|pointing|looks?|looking|cries|crying|coughs?|laughs?|"
                    r"nods?|shakes?|winces?|grimaces?|gestures?|appears?)\b[^()]*)\)",
                    re.IGNORECASE)


def without_stage_directions(text: str) -> str:
    """The text with its bracketed stage directions taken out (:data:`_STAGE`): a
    scripted answer "我肚子痛（被动体位）。" is said as "我肚子痛。"."""
    return re.sub(r"\s{2,}", " ", _STAGE.sub("", text)).strip()


def _addresses_patient(sentence: str) -> bool:
    """The second person about the patient (an actor's brief), not a patient speaking to
    the doctor: a question ("Could you tell me ...?") or Chinese 您/你 is the patient
    addressing the doctor; in Chinese only an actor's words count ("你扮演患者")."""
    if _HAN.search(sentence):
        return bool(_ACTOR_ZH.search(sentence))
    return bool(_SECOND.search(sentence)) and not sentence.rstrip().endswith("?")


def voice_faults(sentence: str, doctor_turn: str, informant: bool = False,
                 line: str | None = None) -> list[str]:
    """What in one patient sentence is not a patient speaking (:data:`FAULTS`): second
    person or an actor instruction, a field label, markdown, the third person (only when
    the patient speaks for themself, ``informant`` False; "he" or "she" counts only when
    the sentence's ``line`` names nobody else they could be), a result when
    ``doctor_turn`` asked for no test or examination, an actor's or record's instruction
    or note, a stage direction in brackets."""
    found = []
    if _addresses_patient(sentence):
        found.append("second_person")
    label = _FIELD_LABEL.search(sentence)
    if label and _is_label(label.group(0).strip(" -*•:：")) and not _NOT_A_LABEL.match(sentence):
        found.append("field_label")
    if _MARKDOWN.search(_HAN_MASK.sub("", sentence)):
        found.append("markdown")
    if not informant and (_THIRD.search(sentence) or (
            _PRONOUN.search(sentence) and not _OTHER_PERSON.search(line or sentence))):
        found.append("third_person")
    if reports_result(sentence) and not asks_for_test(doctor_turn):
        found.append("unrequested_result")
    if _META.search(sentence):
        found.append("instruction")
    if _STAGE.search(sentence):
        found.append("stage_direction")
    return found


# ------------------------------------------------------------------ the rewrite

_BULLET = re.compile(r"(?:^|\s)(?:[-•]|\*(?!\*))\s+(?=[A-Z*])|"
                     r"(?:^|(?<=[:.]\s))\d{1,2}\.\s+(?=[A-Z*])")
_BOLD = re.compile(r"\*\*|__|^#+\s*", re.MULTILINE)
_PREAMBLE = re.compile(
    r"^(?:for (?:your|the) role as (?:an? |the )?patient(?: actor)?|as (?:an? |the )?patient "
    r"actor|for the patient actor|in this role|as the patient)\b[^:,]*[:,]\s*", re.IGNORECASE)
_INSTRUCTION = re.compile(
    r"^(?:remember|note that|keep in mind|make sure|be sure|do not|don't|try to|"
    r"here(?:'s| is) (?:what|the)|you (?:need|should|will need|'ll need) to (?:convey|know|"
    r"describe|report|say|tell)|the following)\b|"
    r"\byour knowledge is limited\b|\b(?:not|n't) (?:be )?aware of (?:your|the|any) "
    r"(?:diagnosis|specific|test|exact|results?)|\bnot been (?:informed|told) of\b|"
    r"\b(?:haven't|have not|didn't|did not) (?:seen|been told|kept track of|been shown) "
    r"(?:any|the) (?:specific )?(?:test|readings|results)\b|"
    r"\b(?:should|need to|must) (?:be aware of|convey|know|remember)\b|"
    r"^(?:the )?(?:information|provided text|text|case report) (?:extracted|provided|given|does"
    r" not|doesn't)|\bare as follows\b|\bincludes?$", re.IGNORECASE)
_ACTOR_ASIDE = re.compile(r"\s*\([^()]*\b(?:you|your)\b[^()]*\)", re.IGNORECASE)
_MENTION = re.compile(r"^mention (?:that )?(noticing|having|experiencing|feeling)\b",
                      re.IGNORECASE)
_TELL = re.compile(r"^(?:mention|say|state|explain|tell (?:the doctor|them))(?: that)?\s+"
                   r"(?=(?:you|your|I|my|he|she|his|her|the patient)\b)", re.IGNORECASE)
_LABEL_ONLY = re.compile(rf"^{_LABEL_EN}\s*:\s*$")
_LABEL_HEAD = re.compile(rf"^({_LABEL_EN})\s*:\s+(?=\S)")
_ZH_LABEL_HEAD = re.compile(r"^([\u4e00-\u9fff]{2,8})[：:]\s*(?=\S)")
_FINDINGS_LABEL = re.compile(r"exam|test|result|finding|lab|imaging|biops|investigation|"
                             r"reading|vital|检查|化验|结果|体格|资料", re.IGNORECASE)


def _lines(text: str) -> list[str]:
    """A section's text as lines: markdown marks removed, each bullet or numbered item on
    its own line, actor asides in parentheses dropped."""
    text = str(text)
    if not is_chinese(text):           # "***" is CSPT's mask of a name, not markdown
        text = _BULLET.sub("\n", _BOLD.sub("", text))
    return [ln.strip() for ln in _ACTOR_ASIDE.sub("", text).splitlines() if ln.strip()]


def _is_label(label: str) -> bool:
    """A field label: at most eight words, or a title-cased heading of at most ten."""
    words = label.split()
    return len(words) <= 8 or (len(words) <= 10 and all(
        w[:1].isupper() or w.lower() in ("of", "or", "and", "to", "the", "in") for w in words))


#: a label that says only that results follow: the label before it names the test
_GENERIC_LABEL = re.compile(r"(?:findings?|results?|readings?|values?|other|interpretation|"
                            r"suggestion|level)", re.IGNORECASE)
_RESULT_TAIL = re.compile(r"\s+(?:findings|results?|readings?|values?)$", re.IGNORECASE)


def _as_finding(label: str, value: str) -> str:
    """A ``label: value`` finding as a sentence that keeps what was examined."""
    label = _RESULT_TAIL.sub("", label.strip())
    if _FINDINGS_LABEL.fullmatch(label.split()[-1]) or re.match(r"(?:I|my)\b", value):
        return value                         # a heading ("Laboratory studies"), or words
    name = " ".join(w if re.match(r"\w*[A-Z0-9]\w*[A-Z]|[A-Z]{2}", w) else w.lower()
                    for w in label.split())
    name = re.sub(r"(?<=\w):(?=\w)", " to ", name)      # "FEV1:FVC ratio": a ratio, spoken
    if re.search(r"\b(?:showed|revealed|found|demonstrated)\b", value, re.IGNORECASE):
        if re.match(r"(?:showed|revealed|found|demonstrated)\b", value, re.IGNORECASE):
            return f"The {name} {value[:1].lower() + value[1:]}"
        return f"In the {name}, {value[:1].lower() + value[1:]}"
    if not re.match(r"\w[A-Z0-9]", value):
        value = value[:1].lower() + value[1:]
    return f"The {name} showed {value}"


def _unlabel(sentence: str, kind: str) -> tuple[str, str]:
    """A sentence without its field labels, and the kind of what follows (a label that
    names an examination or test makes it a finding). A finding keeps what was examined
    (:func:`_as_finding`: "Skin biopsy results: necrobiosis" -> "The skin biopsy showed
    necrobiosis")."""
    zh = is_chinese(sentence)
    head = (_ZH_LABEL_HEAD if zh else _LABEL_HEAD).match(sentence)
    if zh and head and not _ZH_SECTION.search(head.group(1)):   # 结婚年龄：20岁 -> 结婚年龄是20岁
        return f"{head.group(1)}是{sentence[head.end():]}", kind
    named = ""
    while head and _is_label(head.group(1)):
        label, sentence = head.group(1), sentence[head.end():]
        kind = "findings" if _FINDINGS_LABEL.search(label) else kind
        named = label if not _GENERIC_LABEL.fullmatch(label.strip()) else named
        if not zh and sentence.startswith("(") and _LABEL_HEAD.match(sentence[1:]):
            sentence = sentence[1:].replace(")", "", 1) if ")" in sentence else sentence[1:]
        head = (_ZH_LABEL_HEAD if zh else _LABEL_HEAD).match(sentence)
        if not head and not zh and kind == "findings" and named:
            sentence = _as_finding(named, sentence)
    return sentence, kind


#: a Chinese label that names a record's section (月经史, 辅助检查): dropped, not spoken
_ZH_SECTION = re.compile(r"史|情况|资料|检查|结果|信息|主诉|病历")
_TRAILING_LABEL = re.compile(rf"\s+({_LABEL_EN})\s*:$")


# second person -> first
_YOU_FORMS = [(r"you are", "I am"), (r"you're", "I'm"), (r"you were", "I was"),
              (r"you've", "I've"), (r"you'll", "I'll"), (r"you'd", "I'd"),
              (r"aren't you", "am I not"), (r"yourself", "myself"), (r"yours", "mine"),
              (r"your", "my")]
_OBJECT_BEFORE = (r"to|for|with|at|about|on|from|by|into|of|than|like|around|tell|told|"
                  r"ask|asked|give|gave|given|help|helped|make|makes|made|cause|caused|causes|"
                  r"bother|bothers|bothered|affect|affects|affected|let|prescribed|see|saw|"
                  r"sent|advised|examined|diagnosed|informed|keep|kept|keeps|wake|wakes|woke|"
                  r"leave|leaves|left|bring|brought|brings|treated|referred|admitted")
_YOU_OBJECT = re.compile(rf"\b({_OBJECT_BEFORE})\s+you\b(?!\s+(?:have|had|are|were|feel|"
                         r"felt|can|could|should|will|would|do|did|may|might|must|need|"
                         r"noticed|experienced|used|also|still|often|always|never|"
                         r"developed|began|started|underwent|went|were))", re.IGNORECASE)


def _case_like(word: str, new: str) -> str:
    return new[:1].upper() + new[1:] if word[:1].isupper() and new != "I" else new


def second_to_first(text: str) -> str:
    """An actor's brief in the second person as the patient's own words ("you've noticed
    your skin darkening" -> "I've noticed my skin darkening")."""
    for pattern, new in _YOU_FORMS:
        text = re.sub(rf"\b{pattern}\b", lambda m, n=new: _case_like(m.group(0), n), text,
                      flags=re.IGNORECASE)
    text = _YOU_OBJECT.sub(lambda m: f"{m.group(1)} me", text)
    text = re.sub(r"(?<=\w )you\b(?=\s*(?:[.,;:!?)]|$))", "me", text, flags=re.IGNORECASE)
    return re.sub(r"\byou\b", "I", text, flags=re.IGNORECASE)


# third person -> first (a patient who speaks for themself)
_REPORTING = (r"reports?|describes?|notes?|mentions?|states?|complains? of|endorses?|"
              r"recalls?|says|admits(?: to)?|explains?|reveals?|indicates?")
_SUBJECT = r"(?:the patient|patient|he|she)"
_ADVERB = r"(?:(?:also|still|often|usually|always|never|now|only|just|recently|sometimes|" \
          r"occasionally|currently|previously|further|additionally)\s+)*"
_IRREGULAR = {"has": "have", "is": "am", "does": "do", "goes": "go", "hasn't": "haven't",
              "isn't": "am not", "doesn't": "don't", "was": "was", "wasn't": "wasn't"}


def _base_verb(verb: str) -> str:
    """A third-person-singular verb in its first-person form (has -> have, tries -> try)."""
    low = verb.lower()
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if re.search(r"[^aeiou]ies$", low):
        return verb[:-3] + "y"
    if re.search(r"(?:ss|sh|ch|x|z|o)es$", low):
        return verb[:-2]
    if low.endswith("s") and not low.endswith(("ss", "us", "is")):
        return verb[:-1]
    return verb


def _subject_verb(m: re.Match) -> str:
    verb = m.group(3)
    if re.fullmatch(r"(?:had|would|could|will|can|should|might|may|must|did|didn't|"
                    r"\w+ed)", verb, re.IGNORECASE):
        return f"I {m.group(2)}{verb}"
    return f"I {m.group(2)}{_base_verb(verb)}"


def third_to_first(text: str) -> str:
    """A clinician's record of the patient as the patient's own words ("The patient
    reports a 1-month history of double vision" -> "I have a 1-month history of double
    vision"; "she has worried" -> "I have worried"; "Patient denies chest pain" -> "I
    have not had chest pain")."""
    text = re.sub(rf"\b{_SUBJECT}\s+(?:{_REPORTING})\s+that\s+", "", text, flags=re.IGNORECASE)
    text = re.sub(rf"\b{_SUBJECT}\s+(?:{_REPORTING})\s+(?=(?:\w+ing)\b)", "I have been ", text,
                  flags=re.IGNORECASE)
    text = re.sub(rf"\b{_SUBJECT}\s+(?:{_REPORTING})\s+", "I have ", text, flags=re.IGNORECASE)
    text = re.sub(rf"(?:\b{_SUBJECT}\s+|^)denies\s+(?:(?:any\s+)?(?:experiencing|having)\s+)?",
                  "I have not had ", text, flags=re.IGNORECASE)
    text = re.sub(r"^(?:reports|endorses)\s+", "I have ", text, flags=re.IGNORECASE)
    text = re.sub(r"\b(?:the )?patient[’']s\b", "my", text, flags=re.IGNORECASE)
    text = re.sub(rf"\b({_SUBJECT})\s+({_ADVERB})([\w']+)", _subject_verb, text,
                  flags=re.IGNORECASE)
    text = re.sub(r"\bthe patient\b", "I", text, flags=re.IGNORECASE)   # "The patient, who ..."
    text = re.sub(r"\b(?:himself|herself)\b", "myself", text, flags=re.IGNORECASE)
    text = re.sub(r"\bhis\b", "my", text, flags=re.IGNORECASE)
    text = re.sub(r"\bhim\b", "me", text, flags=re.IGNORECASE)
    text = re.sub(r"\bher\b(?=\s+[A-Za-z]\w*)(?!\s+(?:to|for|with|at|and|or|that|about|"
                  r"from|in|on|by|up|down|off|out|again|feel|back)\b)", "my", text)
    text = re.sub(r"\bHer\b", "My", text)
    return re.sub(r"\bher\b", "me", text)


_ZH_SELF = re.compile(r"病人|患者|病员|其(?=[\u4e00-\u9fff])(?![他它余中实])")


def third_to_first_zh(text: str) -> str:
    """A Chinese record of the patient as the patient's words (病人/患者/其 -> 我; 他 and
    她 are left alone: in a patient's words they are someone else)."""
    return _ZH_SELF.sub("我", text)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def first_person(sentence: str, informant: bool = False) -> str:
    """One sentence of a case as the patient says it: second person to first; third
    person to first unless an informant answers (then the patient stays "he"/"she",
    "患儿")."""
    if is_chinese(sentence):
        return sentence if informant else third_to_first_zh(sentence)
    text = second_to_first(sentence)
    return _capital(text if informant else third_to_first(text))


@dataclass(frozen=True)
class PatientFacts:
    """A case's information as the patient's sentences: history (said when asked) and
    findings (said only when an examination or test is asked for)."""

    history: tuple[str, ...]
    findings: tuple[str, ...]


_INFORMANT_TEXT = re.compile(r"\b(?:mother|father|parent|guardian|carer|caregiver|wife|husband|"
                             r"daughter|son)\b[^.;]*\b(?:answers|speaking|speaks|replies)\b",
                             re.IGNORECASE)


_YOUNG = re.compile(r"\b(\d+)[- ](year|month|week|day)s?[- ]old\b", re.IGNORECASE)


def has_informant(case: SPCase) -> bool:
    """Whether someone else answers for the patient: the case's ``informant`` (CSPT), a
    case whose complaint or first section says so ("her mother answers"), or a child
    under twelve by its first section ("8-month-old boy": a parent speaks)."""
    if case.informant:
        return True
    first = next(iter(case.patient_info.values()), "")
    if _INFORMANT_TEXT.search(f"{case.chief_complaint} {first}"):
        return True
    age = _YOUNG.search(str(first))
    return bool(age and (age.group(2).lower() != "year" or int(age.group(1)) < 12))


_NOT_PROVIDED = re.compile(r"^(?:information|details?|data|none) (?:not )?(?:provided|available|"
                           r"given)|^n/?a\b|\bthe following (?:laboratory |test )?(?:findings|"
                           r"results)\.?$|^no (?:additional|further|other|specific) [\w ]{0,30}"
                           r"(?:provided|mentioned|reported|given)|^no mention of",
                           re.IGNORECASE)
_AGE_SEX = re.compile(r"^(?:an? )?(\d+-(?:year|month|week|day)-old [a-z ]{2,20}?)\.?$",
                      re.IGNORECASE)


def _sentence_fact(sentence: str, informant: bool) -> str:
    """One sentence as the patient says it, or "" for an actor instruction or a note
    that the record gives nothing ("Information not provided.")."""
    sentence = _PREAMBLE.sub("", sentence.strip())
    sentence = _MENTION.sub(lambda m: "I have been " + m.group(1), sentence)
    # "Mention that you have ..." is the fact without its instruction; a stage direction
    # in brackets is not said
    sentence = _TELL.sub("", _STAGE.sub("", sentence)).strip()
    if _META.search(sentence):
        return ""
    sentence = re.sub(r"\s*\.?;$", ".", sentence)
    sentence = re.sub(r"\(((?:normal|reference) (?:range|values?)):\s*", r"(\1 ", sentence,
                      flags=re.IGNORECASE)
    if not sentence or _INSTRUCTION.search(sentence) or _LABEL_ONLY.match(sentence) \
            or _NOT_PROVIDED.search(sentence):
        return ""
    age = _AGE_SEX.match(sentence)
    if age and not informant:
        sentence = f"I am a {age.group(1)}."
    return first_person(re.sub(r":$", ".", sentence), informant)


def section_facts(text: str, findings: bool, informant: bool) -> tuple[list[str], list[str]]:
    """One information section as (history, findings) sentences in the patient's voice.
    ``findings``: the whole section reports examinations or tests."""
    history, found = [], []
    kind = "findings" if findings else "history"
    for line in _lines(text):
        if _LABEL_ONLY.match(line) or re.fullmatch(r"[\u4e00-\u9fff]{2,8}[：:]", line):
            kind = "findings" if findings or _FINDINGS_LABEL.search(line) else "history"
            continue
        trailing = _TRAILING_LABEL.search(line)       # "... (range 40-200) Urinalysis:"
        line = line[:trailing.start()] if trailing else line
        line_kind = kind
        for s in _sentences(_PREAMBLE.sub("", line)):
            s, line_kind = _unlabel(s, line_kind)
            fact = _sentence_fact(s, informant)
            if fact:
                to = found if line_kind == "findings" or reports_result(fact) else history
                to.append(fact)
        if trailing:
            kind = "findings" if findings or _FINDINGS_LABEL.search(trailing.group(1)) \
                else "history"
    return history, found


def patient_facts(case: SPCase, findings_section: re.Pattern = FINDINGS_SECTION
                  ) -> PatientFacts:
    """The case's information sections as the patient's sentences (module text); a
    section whose name ``findings_section`` matches holds findings only."""
    informant = has_informant(case)
    history, findings = [], []
    for name, text in case.patient_info.items():
        h, f = section_facts(text, bool(findings_section.search(name)), informant)
        history += h
        findings += f
    return PatientFacts(tuple(dict.fromkeys(history)), tuple(dict.fromkeys(findings)))


def facts_by_section(case: SPCase, findings_section: re.Pattern = FINDINGS_SECTION
                     ) -> Mapping[str, str]:
    """The case's sections rewritten (:func:`patient_facts`), as section -> text: the
    patient's knowledge base (LLM patient, fidelity check) in the patient's voice."""
    informant = has_informant(case)
    out = {}
    for name, text in case.patient_info.items():
        h, f = section_facts(text, bool(findings_section.search(name)), informant)
        if h or f:
            out[name] = "\n".join([*h, *f])
    return out


# ------------------------------------------------------------------ the check, per line

def line_faults(turns, is_fallback, informant: bool = True) -> list[dict]:
    """Each patient line after the opening that is not a fallback (``is_fallback``: the
    line states no fact of the case), with the :data:`FAULTS` of its sentences against
    the doctor turn it answers. ``informant`` True leaves the third person unchecked
    (a caller that does not know who answers)."""
    out = []
    for i in range(1, len(turns)):
        t, before = turns[i], turns[i - 1]
        if t.role != "patient" or before.role != "doctor" or is_fallback(t.text):
            continue
        faults = sorted({f for s in split_sentences(t.text)
                         for f in voice_faults(s, before.text, informant, t.text)},
                        key=FAULTS.index)
        out.append({"turn": i, "text": t.text, "faults": faults})
    return out


def voice_counts(lines) -> dict[str, int]:
    """Patient lines, those with any fault, and the lines with each fault."""
    return {"voice_lines": len(lines), "voice_faulty": sum(bool(x["faults"]) for x in lines),
            **{f"voice_{f}": sum(f in x["faults"] for x in lines) for f in FAULTS}}
