"""RESULTS.md's length-bias section: the text around `lab.experiments.length_bias.length_bias_markdown`."""

from __future__ import annotations

from lab.experiments import length_bias as lb
from lab.training.lengths import resolve_max_length


def length_section(reproduction) -> list[str]:
    """Heading, figure, the experiment's settings and rule, its table and the exact flow."""
    records = reproduction.length
    lecture = records[lb.LECTURE]
    config = lecture.configs[0]
    cap = resolve_max_length(config, lecture.prompts.shape[-1])
    slopes, flows = reproduction.length_exact
    out = ["## Variable length: does 1/|o| lengthen wrong responses? (Dr. GRPO)", "",
           "![length_bias](length_bias.png)", "",
           f"Autoregressive policy, {reproduction.seeds} seeds per setting, each seed run under both divisors (1/|o|: "
           f"`{lb.BIASED}`; the constant C: `{lb.UNBIASED}`) so that runs pair by seed; {config.epochs} epochs x "
           f"{config.steps} steps, G = {config.group_size}, naive loss. The lecture's prompts and reward "
           f"(inclusion-ordering, variable length: each extra token costs 1), cap {cap} tokens with EOS; and Dr. "
           "GRPO's own setting: a 0/1 exact-match reward on a task the policy can solve (prompts [[0], [1]] over "
           f"vocabulary 2, cap {lb.DR_GRPO_OVERRIDES['max_length']}, init scale 0.1, centered deltas). Lengths count "
           "EOS. Rule: the docstring of `lab/experiments/length_bias.py`: a two-sided paired t-test over seeds of "
           "the run-mean wrong length, 1/|o| minus C, whose expected sign is the exact slope difference at "
           "initialisation (claim 20: 1/|o| lengthens wrong responses when their expected deltas are negative, "
           "shortens them when positive).", "",
           *lb.length_bias_markdown(records, reproduction.length_pairs, slopes, flows), "",
           "Why the earlier verdict ('inconclusive, since correct responses have a fixed length') named the wrong "
           "cause: the partial-credit reward charges 1 per extra token, which pulls every run to short wrong "
           "responses whatever the divisor. " + lb.pull_to_length(lecture, float(lecture.prompts.shape[-1] + 1), cap)
           + " The earlier test also compared the runs as independent (Welch) although they share seeds, and left raw "
           "deltas out, the case where the sign reverses."]
    return out
