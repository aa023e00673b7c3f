"""Helpers shared by test modules in different folders: running Snakemake on a copy of the
workflow, the tiny training recipe and model, and a hand-made results tree. Importable as
``support.*`` (``pythonpath = ["tests"]`` in pyproject.toml); test modules import helpers from
here, never from one another."""
