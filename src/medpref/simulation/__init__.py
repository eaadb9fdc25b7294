"""Stage 06: the Standardized Patient test and next-turn evaluation; the doctors
(``06_simulation``, dvc stage ``simulation``) and the grading of their consultations
(``06_sp_grading``, dvc stage ``sp_grading``)."""
