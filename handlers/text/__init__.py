"""Text in and text out: sentences, protected spans, markup, scripts and documents. No torch, no HTTP."""
