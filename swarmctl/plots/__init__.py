"""Figures drawn from saved results (never imports torch)."""
