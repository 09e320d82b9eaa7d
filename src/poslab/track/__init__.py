"""Tracking: the loggers (W&B first), ``summary.json``, the figures and tables a run or a report writes."""
