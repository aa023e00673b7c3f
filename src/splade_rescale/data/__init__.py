"""Evaluation data: datasets, shared corpora and the CPU preparation jobs; demo builds the demo's
committed DL19/DL20 corpus."""
