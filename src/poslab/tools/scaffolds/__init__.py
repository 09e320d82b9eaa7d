"""Templates ``poslab new`` copies. ``modality/`` is the smallest working modality: a real package the test
suite imports and trains, so what a new modality starts from is known to work."""
