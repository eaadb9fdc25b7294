"""Doctor and patient turns as text, shared by stage 01 (sampling), stage 02 (NoteChat)
and stage 05 (the policy's SFT targets).

``text`` — parsing a dialogue into turns, sentences, copied share of a turn;
``turn_quality`` — the checks a usable doctor turn passes.
"""
