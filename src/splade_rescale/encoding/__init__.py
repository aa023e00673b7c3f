"""Encoding corpora and queries into sparse vectors, one concept a module (the project moves its encoding here)."""
