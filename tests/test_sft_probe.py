"""scripts/sft_probe.py generates a turn the way the SP test does: no stop string, so a
question keeps the "?" that makes it one."""

from __future__ import annotations

from medpref.contracts import Turn
from medpref.llm.types import Completion
from medpref.params import load_params
from medpref.prompts import load_prompt
from medpref.simulation.nextturn import asks_question
from script_module import script_module


def _probe():
    return script_module("scripts/sft_probe.py")


class StopCutting:
    """Answers like the hf backend: the text up to (not including) a stop string."""

    def __init__(self, text):
        self.text, self.requests = text, []

    def generate(self, requests):
        self.requests += requests
        out = []
        for r in requests:
            stops = [s for s in r.params.stop if s in self.text]
            cut = min((self.text.find(s) for s in stops), default=len(self.text))
            out.append(Completion(text=self.text[:cut]))
        return out


def test_the_probe_keeps_the_question_mark_the_sp_test_keeps():
    probe = _probe()
    p = load_params().simulation
    item = probe.Item("openings", "sp-x", "sp-x", (Turn(role="patient", text="I feel dizzy."),))
    backend = StopCutting("I see. How long have you felt dizzy? It may be your ears.")
    [raw] = probe.generate(backend, load_prompt(p.doctor_prompt), [item], p.doctor_decoding, 48)
    assert not backend.requests[0].params.stop
    turn = probe.parse_doctor_answer(raw, p.doctor_decoding.stop_after_question)
    assert turn.endswith("dizzy?") and asks_question(turn)
