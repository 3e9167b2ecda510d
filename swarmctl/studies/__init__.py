"""Analysis studies of trained models (the paper, sec. 4.1.4); results are plain arrays saved to NPZ."""
