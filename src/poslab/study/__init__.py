"""Studies of many runs: comparisons over a grid (and its workers), W&B sweeps and dashboards, reports and
their expectations."""
