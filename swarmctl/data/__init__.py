"""Datasets: task generators, the HDF5 schema, and padded length-bucketed batches."""
