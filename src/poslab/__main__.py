"""``python -m poslab …``: the same as the ``poslab`` command (an interpreter's path is all a launcher needs)."""

from poslab.cli import run

if __name__ == "__main__":
    run()
