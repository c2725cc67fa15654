"""Uncertainty bands: relative half-widths by kind of figure, sized from the planner's own errors on the
published rows (`llmbench plan validate`; tests/test_plan.py fails if an error outgrows its band)."""

# the largest error of each kind over planning.md §9, rounded up (see benchmarks/README.md for the table)
PRIORS = {"throughput": 0.20, "latency": 0.45, "memory": 0.05}
# calibrated on the user's own sweep: no published check of its own yet, so the same widths
CALIBRATED = dict(PRIORS)
