"""How a stand-in model is marked: archive.standin writes the marker file next to its weights, and
every answer of a model that has one carries the notice. A module of its own, without torch, so that
building archives (archive.build) imports neither torch nor transformers."""

STANDIN_MARKER = "standin.json"
STANDIN_NOTICE = "offline stand-in model with random weights: this output is NOT a translation"
