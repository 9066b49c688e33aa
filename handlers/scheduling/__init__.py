"""Decoding step by step across requests (scheduler: step): the scheduler and its partitions. No HTTP."""
