"""The cost model: the plan of a run before it starts (plan, from inputs, sizes and model_shapes;
printed by plan_report), its per-unit figures fitted to a measured run (fit_throughputs), the job
schedule and Lucene's search cost."""
