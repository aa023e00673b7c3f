"""The bill of a run before it starts (plan, from model_shapes and config/throughputs.json) and its
schedule on a machine of C cores and G GPUs (schedule)."""
