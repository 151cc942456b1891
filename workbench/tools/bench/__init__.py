"""The benchmark suite (``workbench bench``): its suites, its probes and the reference models it races."""
