"""What the lessons measure: score functions, Table 1, FLOPs, timing and memory probes."""
