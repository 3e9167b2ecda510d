"""Training: the time-budgeted loop with backtracking (loop.py), checkpoints and devices."""
