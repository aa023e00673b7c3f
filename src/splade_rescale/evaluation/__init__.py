"""Scoring runs against qrels (ranx) and the paired significance tests."""
