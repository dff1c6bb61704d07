"""Comparison of predictions with published measurements (../shared/validation/published_dev.csv)."""
