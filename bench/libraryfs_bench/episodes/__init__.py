"""Experiments of the episodes feature."""
