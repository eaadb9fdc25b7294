"""Stage 01 (``01_sampling``): the unlabeled preference set D = ⟨H, C1, F1, C2, F2⟩.

``config`` holds the params section, ``trajectory`` the pure parts (splitting dialogues,
prompting and parsing continuations), ``build`` the run over a model client and
``stage`` the notebook's one call: :func:`medpref.sampling.stage.run`.
"""
