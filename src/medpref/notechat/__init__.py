"""Stage 02: NoteChat, synthetic patient-physician dialogues from clinical notes.

Planning (concept checklist), role-play (doctor and patient agents), polish (ten expert
rules), single-prompt baselines, and the paper's intrinsic evaluation (Tables 2 and 3).
"""
