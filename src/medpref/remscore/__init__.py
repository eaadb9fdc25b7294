"""The Rule Evaluation Model's scorers, shared by the stages that score dialogue states
against the rules: stage 03 (builds and evaluates the REM), stage 04 (scores annotation
states) and stage 06 (the SP test's compliance radar).

``base`` — the scorer interface (:class:`~medpref.remscore.base.RuleScorer`); ``task`` —
the REM's prompt and answer format; ``scorers`` — the prompted, fine-tuned and stub
scorers built from settings; ``compliance`` — per-rule compliance of whole dialogues.
"""
