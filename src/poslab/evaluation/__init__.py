"""Probes of what an encoder does, independent of training."""
