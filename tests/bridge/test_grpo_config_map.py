"""docs/conventions.md maps TRL 1.16's whole GRPOConfig (issue 37, item 5): every field of its own (beside
`TrainingArguments`'), as the lab's option or the reason there is none."""

import dataclasses
from pathlib import Path

import pytest

trl = pytest.importorskip("trl", reason="the TRL extra is not installed (pip install -e '.[trl]')")

DOC = Path(__file__).resolve().parents[2] / "docs" / "conventions.md"


def test_every_grpo_config_field_is_named_in_the_conventions_page():
    """Each field GRPOConfig adds to TrainingArguments appears in backticks on the page. Mutant tried: a new TRL
    field (a name the page lacks) is reported."""
    from transformers import TrainingArguments

    own = {f.name for f in dataclasses.fields(trl.GRPOConfig)} - {f.name for f in dataclasses.fields(TrainingArguments)}
    own.add("learning_rate")  # GRPOConfig redefines TrainingArguments' default (1e-6)
    text = DOC.read_text()
    missing = sorted(name for name in own if f"`{name}`" not in text)
    assert missing == []
    assert "`made_up_field`" not in text  # the check can fail
    assert trl.__version__.startswith("1.16")
