"""SPLADE training: the trainer, recipes, the training-data streams and the collapse verdict."""
