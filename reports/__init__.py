"""Rendering: terminal, HTML, plots, TensorBoard."""
