"""Evaluation data: datasets, shared corpora, the published collection sizes and the CPU
preparation jobs; demo builds the demo's committed DL19/DL20 corpus, fixtures/ the rehearsal's data."""
