"""Benchmarks; run from the repo root as `python -m benches.<name>` (see README.md)."""
