"""RESULTS.md's sections after the experiments' own: each its figure and its text, from a reproduction's records.

    length bias (lab.experiments.length_bias)   the critic (lab.experiments.critic_results)
    GRPO + KL against DPO (lab.experiments.dpo_results)   before RL (lab.experiments.before_rl_results)
    reward-model over-optimisation (lab.experiments.overoptimisation)
    the lecture's conclusions beyond sorting (lab.experiments.beyond_sorting)
    what is sampled, and from which policy (lab.experiments.sampler_results, sampler_section)
    GRPO's descendants (lab.experiments.descendants_results)

A section whose runs the reproduction did not make is left out.
"""

from __future__ import annotations

from pathlib import Path

BEFORE_RL_FIGURE = "before_rl.png"
CRITIC_FIGURE = "critic.png"
DPO_FIGURE = "dpo.png"
LENGTH_FIGURE = "length_bias.png"
OVEROPTIMISATION_FIGURE = "overoptimisation.png"
SAMPLERS_FIGURE = "samplers.png"
DESCENDANTS_FIGURE = "descendants.png"


def section_files(reproduction, out: Path) -> tuple[list[Path], str]:
    """Each section's figure written into `out`, and the sections' RESULTS.md text."""
    paths, text = [], ""
    if reproduction.length is not None:
        from lab.experiments.length_figures import plot_length_bias

        paths.append(plot_length_bias(
            reproduction.length, reproduction.length_pairs, reproduction.length_exact[1], out / LENGTH_FIGURE,
            f"Wrong responses' length under 1/|o| and under the constant divisor C; {reproduction.seeds} seeds"))
    if reproduction.critic is not None:
        from lab.experiments.critic_figures import plot_critic

        paths.append(plot_critic(reproduction.critic, out / CRITIC_FIGURE,
                                 f"PPO's learned critic (gae) against GRPO's group baseline; {reproduction.seeds} "
                                 "seeds, mean and 95% t-band; inset: late exact error by position"))
    if reproduction.dpo is not None:
        from lab.experiments.dpo_results import dpo_markdown, plot_dpo

        paths.append(plot_dpo(reproduction.dpo, reproduction.dpo_groups, out / DPO_FIGURE,
                              f"GRPO (k3, k2 in the loss; k1 in the reward) and DPO at the same beta; {reproduction.seeds} "
                              "seeds, mean over seeds"))
        text += "\n".join(["", "## GRPO with a KL penalty and DPO: where each goes, and how far runs get "
                           "(Rafailov et al. 2023; Azar et al. 2023)", "", f"![dpo]({DPO_FIGURE})", "",
                           *dpo_markdown(reproduction.dpo, reproduction.dpo_groups, reproduction.seeds)]) + "\n"
    if reproduction.before_rl is not None:
        from lab.experiments.before_rl_results import before_rl_markdown, plot_before_rl

        paths.append(plot_before_rl(reproduction.before_rl, reproduction.before_rl_groups,
                                    out / BEFORE_RL_FIGURE, "SFT, expert iteration, GRPO and RL from an SFT start; "
                                    f"{reproduction.seeds} seeds, mean over seeds (diverged runs left out)"))
        text += "\n".join(["", "## Before RL: imitation, filtering, and where RL starts (CS336 assignment 5)", "",
                           f"![before RL]({BEFORE_RL_FIGURE})", "",
                           *before_rl_markdown(reproduction.before_rl, reproduction.before_rl_groups,
                                               reproduction.seeds)]) + "\n"
    if reproduction.overoptimisation is not None:
        from lab.experiments.overoptimisation import for_base
        from lab.experiments.overoptimisation_section import plot_overoptimisation, section_lines

        paths.append(plot_overoptimisation(reproduction.overoptimisation, out / OVEROPTIMISATION_FIGURE))
        text += "\n".join(["", *section_lines(reproduction.overoptimisation, reproduction.seeds,
                                               for_base(reproduction.records.configs[0]))]) + "\n"
    if reproduction.beyond is not None:
        from lab.experiments.beyond_sorting import section_lines as beyond_lines

        text += "\n".join(["", *beyond_lines(reproduction.beyond, reproduction.seeds)]) + "\n"
    if reproduction.samplers is not None:
        from lab.experiments.sampler_section import plot_samplers, section_lines as sampler_lines

        paths.append(plot_samplers(reproduction.samplers, out / SAMPLERS_FIGURE))
        text += "\n".join(["", *sampler_lines(reproduction.samplers)]) + "\n"
    if reproduction.descendants is not None:
        from lab.experiments.descendants_results import plot_descendants, section_lines as descendant_lines

        paths.append(plot_descendants(reproduction.descendants, out / DESCENDANTS_FIGURE))
        text += "\n".join(["", *descendant_lines(reproduction.descendants, reproduction.seeds), "",
                           f"![descendants]({DESCENDANTS_FIGURE})"]) + "\n"
    return paths, text
