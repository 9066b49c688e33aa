"""Finished studies kept as tools users run (bench/studies/README.md): the worker layout sweep."""
