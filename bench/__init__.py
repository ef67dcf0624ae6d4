"""Scale generators and benchmarks (DESIGN.md: ratios measured side by side, never absolute times)."""
