"""Experiments of the cards feature."""
