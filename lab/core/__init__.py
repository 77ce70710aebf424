"""The math of GRPO as pure functions: deltas from rewards, surrogate losses, their aggregation over
tokens, and the KL estimators k1/k2/k3; and DPO's per-pair loss and preference models (`lab.core.dpo`)."""
