"""Medication consultation with retrieval (RagPULSE / MedicineQA): Distill-Retrieve-Read.

* :mod:`.database` — the medicine database as a tree (medicine → "generic name +
  attribute" items), embedded once and cached;
* :mod:`.retrieval` — ranking at attribute and document level, hit rates HR@k;
* :mod:`.toolcall` — the ``search_engine`` tool schema and the parser of its calls;
* :mod:`.distill`, :mod:`.read`, :mod:`.judging` — the three model steps;
* :mod:`.ratings` — Elo (shuffled, bootstrapped) and Bradley–Terry from pairwise verdicts;
* :mod:`.plots` — HR@k curves and rating intervals;
* :mod:`.stage` — stage 08's run and its tables and figures.
"""
