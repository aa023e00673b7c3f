"""Encoding corpora and queries into JsonVectorCollection shards, and Lucene impact and BM25 indexes and searches."""
