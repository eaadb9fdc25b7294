"""What one SP consultation shows about its doctor and its patient, as counts per
consultation: the patient's honesty against its case (sentences the case does not support,
role swaps, "I don't know", fallbacks: turns the case answered nothing of), the doctor's
behaviour (questions, self-repetition, echoes of the patient), and the check that stops a
run whose patient invents too much."""

from __future__ import annotations

from collections.abc import Sequence

from medpref.echo import doctor_sentences, speech_act, split_sentences
from medpref.simulation.config import SimulationParams
from medpref.simulation.patient import fidelity_of, judge_sentences, speaks_as_doctor
from medpref.simulation.patients import fallback_sentences, is_dont_know
from medpref.simulation.voice import line_faults, voice_counts
from medpref.stagekit import StageFailed


def fidelity_judgements(c, kbs, encode, p: SimulationParams) -> list[dict]:
    """One consultation's patient sentences, each judged against its case
    (:func:`medpref.simulation.patient.judge_sentences`; MiniLM, so recorded)."""
    no_fact = fallback_sentences(p.patient)
    return judge_sentences(c.turns, kbs[c.case_id], encode, p.patient.support_threshold,
                           p.patient.relevance_threshold, skip=lambda s: s.strip() in no_fact)


def consult_row(c, judged: list[dict], p: SimulationParams) -> dict:
    """One consultation's counts: the patient's honesty (from its sentence judgements)
    and the doctor's behaviour (pure functions of the transcript)."""
    fid = fidelity_of(judged, c.turns)
    no_fact = fallback_sentences(p.patient)
    patient_turns = [t.text for t in c.turns[1:] if t.role == "patient"]
    replies = [s for s in c.steps if s.get("speaker") == "patient"]
    return {"doctor": c.doctor, "kind": c.kind, "case": c.case_id,
            "department": c.department, "rounds": c.rounds, "ended_by": c.ended_by,
            "sentences": fid.sentences, "volunteered": fid.volunteered,
            "unsupported": fid.unsupported, "unsupported_at": fid.unsupported_at,
            "empty_turns": sum(1 for s in c.steps if s.get("empty")),
            "role_swaps": sum(speaks_as_doctor(t) for t in patient_turns),
            "dont_know": sum(is_dont_know(t) for t in patient_turns),
            "patient_replies": len(replies),
            "fallbacks": sum(bool(s.get("fallback")) for s in replies),
            "nothing_asked": sum(s.get("fallback") == "nothing_asked" for s in replies),
            "examples": fid.examples, **behaviour_row(c, p),
            **voice_counts(line_faults(c.turns, lambda t: t.strip() in no_fact))}


def consult_rows(consults, kbs, encode, p: SimulationParams) -> list[dict]:
    """Per consultation: the patient's honesty and the doctor's behaviour counts."""
    return [consult_row(c, fidelity_judgements(c, kbs, encode, p), p) for c in consults]


def behaviour_row(c, p: SimulationParams) -> dict:
    """The doctor's turns of one consultation: how many ask something, how much each
    repeats itself (share of repeated word 3-grams), how many sentences echo the
    patient."""
    turns = c.doctor_turns
    sents = doctor_sentences(c.turns, p.grader.echo_overlap, p.grader.echo_min_new)
    return {"doctor_turns": len(turns),
            "question_turns": sum(any(speech_act(s) == "question" for s in split_sentences(t))
                                  for t in turns),
            "repetition_share": (sum(repetition_share(t) for t in turns) / len(turns)
                                 if turns else 0.0),
            "doctor_sentences": len(sents), "echo_sentences": sum(s.echo for s in sents),
            "doctor_words": sum(len(t.split()) for t in turns)}


def repetition_share(text: str, n: int = 3) -> float:
    """Share of a turn's word n-grams that repeat an earlier n-gram of the same turn."""
    words = text.lower().split() if " " in text.strip() else list(text.strip())
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


def check_fidelity(rows: Sequence[dict], limit: float, min_sentences: int = 1) -> None:
    """Fail the run when the patient states too much that is not in its case: the
    unsupported share of patient sentences must stay within ``limit`` over all doctors
    and for each doctor, wherever there are at least ``min_sentences`` of them (1 of 1
    is no share to stop a run on, pooled or not)."""
    bad = []
    groups = {"all doctors": list(rows)}
    groups.update({d: [r for r in rows if r["doctor"] == d]
                   for d in dict.fromkeys(r["doctor"] for r in rows)})
    for name, mine in groups.items():
        if sum(r["sentences"] for r in mine) < min_sentences:
            continue        # pooled or per doctor: too few sentences to be a share
        sentences = sum(r["sentences"] for r in mine)
        unsupported = sum(r["unsupported"] for r in mine)
        if sentences and unsupported / sentences > limit:
            example = next((u for r in mine for u in r["unsupported_at"]), "")
            bad.append(f"{name}: {unsupported} of {sentences} patient sentences "
                       f"({unsupported / sentences:.0%}) not in the case, e.g. '{example[:80]}'")
    if bad:
        raise StageFailed("06_simulation: unsupported share above "
                          f"simulation.patient.max_unsupported_share {limit:g}: "
                          + "; ".join(bad))
