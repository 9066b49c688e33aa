"""The HTTP edge: request bodies in (native, v1, v2), validation, client errors and response bodies out.

Only the handler's top level imports this package; text and model code never do.
"""
