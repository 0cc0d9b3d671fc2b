"""Speed comparisons of rankflow with hand-written JAX peers (not part of the tests).

Run one with ``python -m benchmarks.<name>`` from the repository root; see README.md.
"""
