"""Stage 04's pair_quality metric: does a strategy prefer the real turn over a degenerate one?"""

from types import SimpleNamespace

from medpref.annotation.analysis import pair_quality
from medpref.contracts import PreferencePair, Turn

PROMPT = [Turn(role="doctor", text="What brings you in today?"),
          Turn(role="patient", text="I have had a cough for two weeks and some fever at night.")]
REAL = "Do you bring up any phlegm, and have you lost weight?"
LOOP = ("I'm so sorry to hear that you are unwell today. "
        "I'm so sorry to hear that you are unwell today.")
LEAK = "Doctor: Conversation so far: the patient has a cough."


def pair(i, chosen, rejected, chosen_source, rejected_source):
    return PreferencePair(id=f"p{i}", prompt=PROMPT, chosen=chosen, rejected=rejected,
                          strategy="cai_avg", chosen_source=chosen_source,
                          rejected_source=rejected_source)


def test_counts_real_over_degenerate_and_the_reverse():
    pairs = [pair(1, REAL, LOOP, "sampled", "generated"),      # real over a loop
             pair(2, LEAK, REAL, "generated", "sampled"),      # a leak over the real turn
             pair(3, LOOP, REAL, "generated", "sampled"),      # a loop over the real turn
             pair(4, REAL, "Have you travelled recently?", "sampled", "generated")]
    got = pair_quality({"cai_avg": SimpleNamespace(pairs=pairs)})["cai_avg"]
    assert got == {"pairs": 4, "chosen_degenerate": 2, "rejected_degenerate": 1,
                   "real_over_degenerate": 1, "degenerate_over_real": 2}


def test_an_empty_strategy_counts_zero():
    assert pair_quality({"agent": SimpleNamespace(pairs=[])})["agent"]["pairs"] == 0
