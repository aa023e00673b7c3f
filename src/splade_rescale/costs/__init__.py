"""The cost model: the plan of a run before it starts, its calibration on a measured run, the job
schedule and Lucene's search cost."""
