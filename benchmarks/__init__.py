"""Side-by-side benchmarks of delayq and its peers (see benchmarks/README.md)."""
