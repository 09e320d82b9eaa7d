"""``python -m poslab.cli``: the ``poslab`` command (a comparison's workers start it so)."""

from poslab.cli import run

run()
