"""``python -m poslab …`` and the ``poslab`` command: the command line of :mod:`poslab.cli`.

The command's modules load here, inside the one line a Ctrl-C gets (``poslab: interrupted``, exit 130): a
signal while they load (a second or more on a busy machine) would otherwise end in a traceback.
"""

import sys


def run() -> None:
    """The ``poslab`` command."""
    try:
        from poslab.cli import run as command  # deferred: a Ctrl-C while it loads is one line, not a traceback
    except KeyboardInterrupt:
        print("poslab: interrupted", file=sys.stderr)
        sys.exit(130)
    command()


if __name__ == "__main__":
    run()
