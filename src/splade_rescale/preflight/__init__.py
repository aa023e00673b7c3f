"""The machine proves itself before the paper run (``splade-rescale preflight``, ``make preflight``):
its environment checked against the config's plan (``environment``), the run's own encode and
training code timed on real text (``measure``), the device's metrics against the CPU's (``parity``),
and one page that ends with the bill on this machine and what to fix first (``page``)."""
