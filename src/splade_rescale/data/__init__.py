"""Evaluation data: datasets, shared corpora and the CPU preparation jobs; fixtures/ builds the
demo's and the rehearsal's data."""
