"""The domain of one translation: what a request asks, its sentences, what they answer.

Below the handler and above the model: nothing here knows HTTP (handlers.wire converts to and
from these types at the edge) or TorchServe.
"""
