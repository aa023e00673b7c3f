"""Evaluation data: datasets, shared corpora and the CPU preparation jobs; fixtures/ builds the
demo's data."""
