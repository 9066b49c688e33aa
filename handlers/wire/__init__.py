"""The HTTP edge: request bodies in (native, KServe v1 and v2, LibreTranslate), validation, client
errors and response bodies out. One module per envelope; envelopes.ENVELOPES lists them all.

Only the handler's top level (zh_en_handler.py, jobs.py) imports this package; the rest of
handlers/ works on the domain types (handlers.translation) and never does.
"""
