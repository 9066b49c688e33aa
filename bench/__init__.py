"""Benchmarks: quality (sacrebleu), latency ladder, Locust load, report."""
