"""The bridge to TRL: the sorting task for a tiny causal transformer that TRL's trainers can train.

Nothing here is imported by the rest of the lab, and nothing here is imported until it is used:
transformers and TRL are an optional part of the install (`pip install -e ".[trl]"`; the README's
requirements include it). Every model is built from a config and a tokenizer made in code; nothing
is loaded from a hub (`HF_HUB_OFFLINE=1` is set before transformers is imported).
"""
