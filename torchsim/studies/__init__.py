"""Reproductions of published simulator studies, shared by tests and benchmarks."""
