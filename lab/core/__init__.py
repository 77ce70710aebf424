"""The math of GRPO as pure functions: deltas from rewards, surrogate losses, their aggregation over
tokens, and the KL estimators k1/k2/k3; DPO's per-pair loss and preference models (`lab.core.dpo`); and PPO's
critic side: GAE, the clipped value loss, whitening (`lab.core.gae`). The modes every option chooses from are
`str` enums in `lab.core.modes`, which loads without torch."""
