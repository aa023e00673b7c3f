"""The per-backbone summaries, the paper's tables and figures, and multi-seed spreads."""
