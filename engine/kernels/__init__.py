"""Paged-attention kernels: Triton for the CUDA path (K/V writes, unified and split-KV attention read through
block tables) and C++ for CPU decodes."""
