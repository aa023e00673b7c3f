"""MLM heads and what is done to them: head access, rescaling, vocabulary transfer, norms, the SPLADE
encoder, its fused head and losses."""
