"""Uniform reservoir samples over acyclic joins under inserts (Dai, Hu, Yi SIGMOD 2024), pure Python core."""
from __future__ import annotations

from .sampler import JoinResult, JoinSampler
from .spec import JoinSpec

__all__ = ["JoinResult", "JoinSampler", "JoinSpec"]
