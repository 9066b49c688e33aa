"""Decoding step by step across requests: the scheduler and its partitions. No HTTP."""
