"""Atari as RL Zoo runs it (Stable-Baselines3's AtariWrapper): no-op starts, FIRE on reset, a lost
life ending the training episode and clipped rewards, as the config section ``env.atari``.

The wrappers sit where SB3 puts them: NOOPs on the raw env, then the action repeat
(``env.max_and_skip``), then the life-loss end, then FIRE, then the reward clipping. What changes
the data the agent learns from (a lost life as an episode end, the rewards' sign) applies to the
training envs only: evaluation plays whole games and returns the game's score, as RL Zoo
reports it, pressing FIRE after a lost life as a training env's reset does. The training loops
log whole games too (:class:`GameMonitor`, where SB3's Monitor sits), so a run's
``recent_mean_return`` is the games' raw scores, as SB3's ``ep_rew_mean``. What a deployed
policy must do at the start of an episode and after a lost life (FIRE, then action 2) is recorded
in the manifest (its ``env``) and done by the bundle (``Policy.begin_episode``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Dict, List, Tuple

import gymnasium as gym
import numpy as np

from ..deploy.frames import FIRE_RESET_ACTIONS


@dataclass
class AtariConfig:
    noop_max: int = 0
    """At reset, 1..noop_max NOOP actions (uniform, the env's seeded generator; SB3's NoopResetEnv). 0: off."""
    fire_reset: bool = False
    """At reset, FIRE then action 2 before the first observation (SB3's FireResetEnv); in the manifest, done by the bundle."""
    episodic_life: bool = False
    """Training envs: a lost life ends the episode, the game goes on at the next reset (SB3's EpisodicLifeEnv); logged as games."""
    clip_reward: bool = False
    """Training envs: each reward replaced by its sign (SB3's ClipRewardEnv); the run logs and evaluation return the game's score."""

    checks: ClassVar[Dict[str, Tuple[Callable[[Any], bool], str]]] = {"noop_max": (lambda v: v >= 0, "a number >= 0")}


def action_meanings(env) -> List[str]:
    get = getattr(env.unwrapped, "get_action_meanings", None)
    return list(get()) if get is not None else []


def lives(env, info: dict) -> int:
    ale = getattr(env.unwrapped, "ale", None)
    return int(ale.lives()) if ale is not None else int(info.get("lives", 0))


class NoopReset(gym.Wrapper):
    def __init__(self, env, noop_max: int):
        super().__init__(env)
        self.noop_max = int(noop_max)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for _ in range(int(self.unwrapped.np_random.integers(1, self.noop_max + 1))):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class FireReset(gym.Wrapper):
    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for action in FIRE_RESET_ACTIONS:
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class EpisodicLife(gym.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.lives, self.real_done = 0, True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.real_done = terminated or truncated
        now = lives(self.env, info)
        if 0 < now < self.lives:
            terminated = True
        self.lives = now
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.real_done:
            obs, info = self.env.reset(**kwargs)
        else:  # a lost life: the game goes on from where it is
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.lives = lives(self.env, info)
        return obs, info


class FireOnLifeLoss(gym.Wrapper):
    """With fire_reset where a lost life does not end the episode (evaluation's whole games): after
    a lost life that did not end the game, FIRE then 2 within the same step (their rewards added),
    as a life-loss training env's reset presses them; without it a policy that learned never to
    press FIRE waits out the game's time limit."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.lives = lives(self.env, info)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        now = lives(self.env, info)
        if 0 < now < self.lives and not (terminated or truncated):
            for a in FIRE_RESET_ACTIONS:
                obs, more, terminated, truncated, info = self.env.step(a)
                reward += more
                if terminated or truncated:
                    break
        self.lives = lives(self.env, info)
        return obs, reward, terminated, truncated, info


class GameMonitor(gym.Wrapper):
    """Training envs whose episode is not the game (a lost life ends it, or the rewards are
    clipped): the whole game's raw score and length (steps of the action repeat, the FIRE
    presses of the resets included) in the info of the step that
    ends the game, as ``game_return`` and ``game_length``, which envs.step_transitions hands to the
    training loops. It sits on the action repeat, under the life-loss end, the FIRE reset and the
    clipping, so it sees every agent step of the game with its unclipped reward (the no-op starts
    below the repeat are not counted: they score nothing at a game's start)."""

    def reset(self, **kwargs):
        self.score, self.steps = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.score += float(reward)
        self.steps += 1
        if terminated or truncated:
            info = dict(info, game_return=self.score, game_length=self.steps)
        return obs, reward, terminated, truncated, info


def reports_games(cfg: AtariConfig) -> bool:
    """Whether the training envs of ``cfg`` end episodes that are not whole games or change their
    rewards, so that their GameMonitor reports the games."""
    return bool(cfg.episodic_life or cfg.clip_reward)


class ClipReward(gym.RewardWrapper):
    def reward(self, reward):
        return float(np.sign(reward))


class Unsupported(ValueError):
    """A key of env.atari the env cannot do (envs.make_env reports it as a ConfigError)."""


def check(cfg: AtariConfig, env, env_id: str) -> None:
    """Refuse what the env cannot do (Unsupported, naming the key)."""
    meanings = action_meanings(env)
    if cfg.noop_max and meanings[:1] != ["NOOP"]:
        raise Unsupported(f"key 'env.atari.noop_max' is {cfg.noop_max}, but {env_id}'s action 0 is not NOOP "
                          f"(action meanings: {meanings or 'none'})")
    if cfg.fire_reset and (meanings[1:2] != ["FIRE"] or len(meanings) < 3):
        raise Unsupported(f"key 'env.atari.fire_reset' is true, but {env_id}'s action 1 is not FIRE (action "
                          f"meanings: {meanings or 'none'}); set env.atari.fire_reset: false")
    if cfg.episodic_life and getattr(env.unwrapped, "ale", None) is None:
        raise Unsupported(f"key 'env.atari.episodic_life' is true, but {env_id} reports no lives (an ALE game's "
                          f"ale.lives()); set env.atari.episodic_life: false")


def wrap(env, cfg: AtariConfig, env_id: str, repeat: Callable[[Any], Any], training: bool):
    """``env`` with the wrappers of ``cfg`` in SB3's order around ``repeat`` (the action repeat)."""
    if cfg.noop_max or cfg.fire_reset or cfg.episodic_life:
        check(cfg, env, env_id)
    if cfg.noop_max:
        env = NoopReset(env, cfg.noop_max)
    env = repeat(env)
    if training and reports_games(cfg):
        env = GameMonitor(env)
    if training and cfg.episodic_life:
        env = EpisodicLife(env)
    elif cfg.fire_reset and getattr(env.unwrapped, "ale", None) is not None:
        env = FireOnLifeLoss(env)
    if cfg.fire_reset:
        env = FireReset(env)
    if training and cfg.clip_reward:
        env = ClipReward(env)
    return env
