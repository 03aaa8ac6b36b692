"""Measurement: saved-activation accounting, peak memory, FLOPs, timing, provenance."""
