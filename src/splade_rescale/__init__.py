"""Pipeline for 'Rescaling MLM-Head for Neural Sparse Retrieval' (arXiv 2606.18811)."""

__version__ = "0.1.0"
