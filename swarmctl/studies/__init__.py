"""Analysis studies of trained models (protocol sec. 3); results are plain arrays saved to NPZ."""
