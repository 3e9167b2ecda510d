"""Training: losses, the time-budgeted loop with backtracking, checkpoints, devices and evaluation."""
