"""The one vLLM boundary that changes vLLM: the mechanism (`patching.py`), the registry of
changes (`registry.py`), the changes by vLLM area (`changes/`), the hook, metrics."""
