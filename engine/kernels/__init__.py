"""Triton kernels for the CUDA path: paged K/V writes and paged attention read through block tables."""
