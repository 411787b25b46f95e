"""What is built on the replay engine: a corpus of recordings replayed against new code
(``corpus.py``, calling each recording's entry through ``corpus_entry.py``) and what changed
between two runs (``diff.py``). The engine itself, one recorded request replayed in test code,
is ``chronicle.replay``; this package only drives it and reads what it made.
"""
