"""Evaluation data: datasets, shared corpora, the published collection sizes and the CPU
preparation jobs; fixtures/ builds the demo's and the rehearsal's data."""
