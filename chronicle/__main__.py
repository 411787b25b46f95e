"""``python -m chronicle``: the ``chronicle`` command (see ``chronicle.cli``)."""

from chronicle.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
