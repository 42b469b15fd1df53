"""What spans several frames and so lives outside the policy cell: frame stacking and the
action repeat with a two-frame max, shared by training, evaluation and deployment."""
from __future__ import annotations

from typing import Optional

import numpy as np

FIRE_RESET_ACTIONS = (1, 2)
"""What a FIRE-reset Atari env does after every reset, before the first observation (SB3's
FireResetEnv: FIRE, then action 2): the deployed policy's ``reset_actions``."""


class FrameStack:
    """The k most recent observation rows of each of B streams, oldest first, concatenated:
    (B, k * d). A stream starts (and restarts, ``reset_mask``) with zeros and its first row last,
    as Stable-Baselines3's VecFrameStack. What cannot be a pure function of one frame lives here,
    outside the policy cell; the training loop (algorithms/on_policy.py), the episode runner and
    the deployed ``Policy.act`` all use this class, and the manifest records it
    (``spaces.observation.frame_stack``: kind, k, order) so load_policy / verify reproduce it."""

    KIND = "frame_stack"
    ORDER = "oldest_first"

    def __init__(self, k: int, width: int):
        self.k, self.width = int(k), int(width)
        self.buf: Optional[np.ndarray] = None

    def reset(self, rows: np.ndarray) -> np.ndarray:
        """Start every stream with ``rows`` (B, d); returns the stacked rows (B, k * d)."""
        rows = np.asarray(rows)
        self.buf = np.zeros((len(rows), self.k * self.width), rows.dtype)
        self.buf[:, -self.width:] = rows
        return self.buf.copy()

    def push(self, rows: np.ndarray, reset_mask: Optional[np.ndarray] = None) -> np.ndarray:
        """Append ``rows``; the streams of ``reset_mask`` restart (zeros, then the row)."""
        rows = np.asarray(rows)
        if self.buf is None or len(self.buf) != len(rows):
            return self.reset(rows)
        self.buf[:, :-self.width] = self.buf[:, self.width:].copy()
        self.buf[:, -self.width:] = rows
        if reset_mask is not None and np.any(reset_mask):
            self.buf[np.asarray(reset_mask, bool), :-self.width] = 0
        return self.buf.copy()

    def peek(self, rows: np.ndarray) -> np.ndarray:
        """The stacked rows ``push(rows)`` would give, without changing the state (the true final
        observation of an ended episode, for the value bootstrap)."""
        rows = np.asarray(rows)
        if self.buf is None or len(self.buf) != len(rows):  # what push would start with: zeros, then rows
            out = np.zeros((len(rows), self.k * self.width), rows.dtype)
            out[:, -self.width:] = rows
            return out
        out = np.empty_like(self.buf)
        out[:, :-self.width] = self.buf[:, self.width:]
        out[:, -self.width:] = rows
        return out

    def spec(self) -> dict:
        return {"kind": self.KIND, "k": self.k, "order": self.ORDER}


class MaxAndSkip:
    """Action repeat with flicker removal, exactly as Stable-Baselines3's MaxAndSkipEnv (Atari):
    every agent action is sent ``skip`` times to an environment that renders every frame, the
    rewards are summed, and the observation is the pixel-wise maximum of a two-frame buffer that
    receives the repeat's frames ``skip - 2`` and ``skip - 1``. The buffer lives across repeats and
    episodes, as SB3's ``_obs_buffer``: when an episode ends early in a repeat, the frames the
    repeat did not reach are still the previous repeat's (so the terminal observation is SB3's,
    frame for frame; only a truncated episode's bootstrap value reads it). It spans emulator
    frames, so it cannot be in the policy cell: the training environment (envs.MaxAndSkipEnv), the
    evaluation episodes and a deployment loop all call :meth:`repeat`, one object per environment;
    the manifest records it (``spaces.observation.max_and_skip``: kind, skip, pool) and
    ``Policy.max_and_skip`` gives it back to the deploying code::

        obs, reward, terminated, truncated, info = policy.max_and_skip.repeat(device_step, action)
    """

    KIND = "max_and_skip"
    POOL = "max_last_2"

    def __init__(self, skip: int):
        if int(skip) < 2:
            raise ValueError(f"max-and-skip needs skip >= 2, got {skip}")
        self.skip = int(skip)
        self.frames: Optional[np.ndarray] = None  # SB3's _obs_buffer, zeros until the first frame

    def repeat(self, step, action):
        """``step(action)`` (gymnasium's 5-tuple) up to ``skip`` times, stopping where the episode
        ends: (pooled observation, summed reward, terminated, truncated, the last info)."""
        total = 0.0
        for i in range(self.skip):
            obs, reward, terminated, truncated, info = step(action)
            if self.frames is None:
                self.frames = np.zeros((2,) + np.shape(obs), np.asarray(obs).dtype)
            if i >= self.skip - 2:
                self.frames[i - self.skip + 2] = obs
            total += float(reward)
            if terminated or truncated:
                break
        return self.frames.max(axis=0), total, terminated, truncated, info

    def spec(self) -> dict:
        return {"kind": self.KIND, "skip": self.skip, "pool": self.POOL}
