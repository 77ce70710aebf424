"""GRPO sorting lab: policy-gradient mechanics, exact and fast, on a toy sorting task."""

from lab.config import ConfigError, TrainConfig, resolve_device
from lab.deltas import DeltaMode, compute_deltas
from lab.kl import k1, k2, k3, kl_penalty
from lab.losses import LossMode, compute_loss
from lab.policy import Policy, PolicyStack
from lab.rollout import response_log_probs, sample_responses
from lab.train import train

__all__ = [
    "ConfigError", "DeltaMode", "LossMode", "Policy", "PolicyStack", "TrainConfig", "compute_deltas",
    "compute_loss", "k1", "k2", "k3", "kl_penalty", "resolve_device", "response_log_probs",
    "sample_responses", "train",
]
