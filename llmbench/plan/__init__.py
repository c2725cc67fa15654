"""Capacity planning: measured, analytic and simulated GPU counts for a target QPS under P99 SLOs."""
