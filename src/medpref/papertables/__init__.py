"""Stage 09: every paper artefact the pipeline makes, in the papers' own layout.

:mod:`.spec` reads the registry (``configs/paper_tables.yaml``), :mod:`.build` assembles
one table from a stage's CSV beside the paper's published rows (with a trace of where
each of our numbers came from), :mod:`.index` writes ``reports/index.md``, and
:mod:`.stage` is the stage's run.
"""
