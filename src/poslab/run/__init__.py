"""A run's life: train, evaluate, resume; its directory, lock, checkpoints, cluster launch and callbacks."""
