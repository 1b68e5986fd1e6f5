"""Experiments of the code feature."""
