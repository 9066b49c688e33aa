"""The model: load, quantize, tokenize, decode, batch and cut long sentences. No HTTP."""
