"""Sandbox escape tests: probes (shared with bench/escape_matrix.py) run under every confining
backend this machine offers, each judged by its effects on the real host."""
