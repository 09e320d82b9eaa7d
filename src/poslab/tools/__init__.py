"""Side commands: ``poslab show``, ``bench``, ``new`` (scaffolds), ``make gpu-check`` and ``make docs``."""
