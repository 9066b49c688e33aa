"""Batch prediction: translate a corpus with the same archive, handler config and text pipeline as the
server, in process or on Ray Data (docs/BATCH.md)."""
