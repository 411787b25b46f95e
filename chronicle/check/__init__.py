"""Checking what an agent did against what its profile says it is for: model-free checks and
constraint predicates (``evaluate.py``, over ``schema.py``), the opt-in model judge
(``judge.py``), and the correction a failed check leaves behind (``correction.py``)."""
