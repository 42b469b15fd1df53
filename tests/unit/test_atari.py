"""The env.atari section (msrl_consistent.atari): SB3's AtariWrapper behaviours on a small game
with ALE's interface (action meanings, ale.lives()), and what a deployment is told to do at reset."""
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from msrl_consistent.config import ConfigError, load_config
from msrl_consistent.envs import make_env, make_vec_env, seed_vec_env, step_transitions


class _Ale:
    def __init__(self, game):
        self.game = game

    def lives(self):
        return self.game.lives


class LivesGame(gym.Env):
    """3 lives, one lost every 4 steps after the ball was launched (FIRE); reward 4 per step in play.
    The observation is [steps since reset, launched, lives, last action]."""
    observation_space = spaces.Box(-1e6, 1e6, (4,), np.float32)
    action_space = spaces.Discrete(4)

    def __init__(self):
        self.ale = _Ale(self)  # as an ALE env, from its construction
        self.lives = 3

    def get_action_meanings(self):
        return ["NOOP", "FIRE", "RIGHT", "LEFT"]

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.lives, self.t, self.launched, self.last = 3, 0, 0, -1
        return self._obs(), {"lives": self.lives}

    def _obs(self):
        return np.array([self.t, self.launched, self.lives, self.last], np.float32)

    def step(self, action):
        self.t, self.last = self.t + 1, int(action)
        self.launched = self.launched or int(action == 1)
        reward = 4.0 if self.launched else 0.0
        if self.launched and self.t % 4 == 0:
            self.lives -= 1
            self.launched = 0
        return self._obs(), reward, self.lives == 0, False, {"lives": self.lives}


if "MsrlTestLives-v0" not in gym.registry:
    gym.register("MsrlTestLives-v0", entry_point=LivesGame)


def _cfg(**atari):
    sets = ["env.id=MsrlTestLives-v0"] + [f"env.atari.{k}={str(v).lower()}" for k, v in atari.items()]
    return load_config("ppo/CartPole-v1", sets).env


def test_noop_starts_are_seeded_and_within_noop_max():
    env = make_env(_cfg(noop_max=5))
    starts = [env.reset(seed=s)[0][0] for s in range(40)]
    assert set(starts) <= {1, 2, 3, 4, 5} and len(set(starts)) > 1
    assert starts == [make_env(_cfg(noop_max=5)).reset(seed=s)[0][0] for s in range(40)]


def test_fire_reset_presses_fire_then_2_before_the_first_observation():
    obs, _ = make_env(_cfg(fire_reset=True)).reset(seed=0)
    assert obs[0] == 2 and obs[1] == 1 and obs[3] == 2  # two steps taken, launched, action 2 last


def test_life_loss_ends_a_training_episode_but_not_an_evaluation():
    cfg = _cfg(episodic_life=True, fire_reset=True, clip_reward=True)
    train = make_env(cfg, training=True)
    obs, _ = train.reset(seed=0)
    rewards, ended = [], False
    while not ended:
        obs, r, ended, _, _ = train.step(2)
        rewards.append(r)
    assert obs[2] == 2 and set(rewards) == {1.0}  # a life lost ends the episode; rewards clipped to their sign
    obs, _ = train.reset()
    assert obs[2] == 2 and obs[1] == 1  # the game goes on (no real reset), FIRE pressed again
    evaluation = make_env(cfg)
    evaluation.reset(seed=0)
    _, r, ended, _, _ = evaluation.step(2)
    assert r == 4.0 and not ended  # evaluation: the game's score, whole games
    obs, r, ended, _, _ = evaluation.step(2)  # t = 4: a life lost, then FIRE and 2 within the step
    assert obs[2] == 2 and obs[1] == 1 and obs[3] == 2 and r == 4.0 + 4.0 + 4.0 and not ended


def test_the_training_vector_env_uses_the_training_wrappers():
    venv = make_vec_env(_cfg(episodic_life=True, fire_reset=True, clip_reward=True), 2)
    seed_vec_env(venv, 0)
    _, r, terminated, _, _, _ = step_transitions(venv, np.array([2, 2]))
    assert (r == 1.0).all() and not terminated.any()


def test_the_training_envs_report_whole_games_with_their_raw_score():
    """Lives end the training episodes and rewards are clipped, but the step that ends the game
    reports its score (4 per step in play) and length, as SB3's Monitor under the AtariWrapper."""
    venv = make_vec_env(_cfg(episodic_life=True, fire_reset=True, clip_reward=True), 2)
    seed_vec_env(venv, 0)
    lives_ended, clipped = 0, 0.0
    for _ in range(40):
        _, r, terminated, _, _, games = step_transitions(venv, np.array([2, 2]))
        clipped += r[0]
        if terminated[0] and np.isnan(games[0, 0]):
            lives_ended += 1
        if not np.isnan(games[0, 0]):
            break
    # game steps t = 1..12 (the resets' NOOP, FIRE and 2 included), each scoring 4 once the ball
    # is in play (all but t = 5 and 9, the NOOPs that resume a game after a lost life); a life
    # lost at t = 4, 8, 12; the agent's own steps are t = 3, 4, 8, 12 (clipped: 1 each)
    assert lives_ended == 2 and clipped == 4.0
    assert games[0].tolist() == [40.0, 12.0] and games[1].tolist() == games[0].tolist()


def test_the_tally_logs_games_where_the_envs_report_them_and_episodes_elsewhere():
    from msrl_consistent.pipeline import EpisodeTally

    class Run:
        def __init__(self):
            self.logged = []

        def episode_done(self, ret, length):
            self.logged.append((ret, length))

    nan = np.nan
    for games_mode, expect in ((False, [[(2.0, 2)], [(1.0, 1)]]), (True, [[(24.0, 12)], []])):
        runs = [Run(), Run()]  # two members of one env each
        tally = EpisodeTally(runs, 1, games_mode)
        tally.step(np.array([1.0, 1.0]), np.array([False, True]), np.full((2, 2), nan))
        tally.step(np.array([1.0, 0.0]), np.array([True, False]), np.array([[24.0, 12.0], [nan, nan]]))
        assert [r.logged for r in runs] == expect


def test_a_training_run_logs_games_not_lives(tmp_path):
    """PPO on the lives game with every training wrapper: each logged return is a whole game's
    unclipped score (at least 24: the resets' FIRE and 2 score 4 each, 3 lives), where a life's
    clipped return is at most 4."""
    import json
    import os

    from msrl_consistent.cli import main
    run = str(tmp_path / "run")
    sets = ["env.id=MsrlTestLives-v0", "env.n_envs=2", "env.max_episode_steps=200", "algo.n_steps=64",
            "algo.batch_size=64", "algo.n_epochs=1", "eval.freq=0", "eval.episodes=1"] + \
        [f"env.atari.{k}=true" for k in ("fire_reset", "episodic_life", "clip_reward")]
    args = ["train", "ppo/CartPole-v1", "--run-dir", run, "--total-timesteps", "256", "--quiet"]
    assert main(args + [a for kv in sets for a in ("--set", kv)]) == 0
    with open(os.path.join(run, "metrics.jsonl")) as f:
        logged = [m["recent_mean_return"] for m in map(json.loads, f) if "recent_mean_return" in m]
    assert logged and min(logged) >= 24.0


@pytest.mark.parametrize("key,words", [("fire_reset", "action 1 is not FIRE"), ("noop_max", "action 0 is not NOOP"),
                                       ("episodic_life", "reports no lives")])
def test_an_env_without_the_interface_is_refused(key, words):
    cfg = load_config("ppo/CartPole-v1", [f"env.atari.{key}={'3' if key == 'noop_max' else 'true'}"]).env
    with pytest.raises(ConfigError, match=f"env.atari.{key}.*{words}"):
        make_env(cfg)


def test_the_deployed_policy_is_told_what_to_do_at_reset(tmp_path):
    """The manifest's env.atari.fire_reset gives the bundle's reset_actions; begin_episode sends them."""
    from msrl_consistent.deploy.reader import _reset_actions
    assert _reset_actions({"env": {"atari": {"fire_reset": True}}}) == (1, 2)
    assert _reset_actions({"env": {"id": "CartPole-v1"}}) == ()
    from msrl_consistent.deploy import ExportError, Policy
    with pytest.raises(ExportError, match="env.atari.fire_reset"):
        _reset_actions({"env": {"atari": {"fire_reset": "yes"}}})
    sent = []
    policy = Policy.__new__(Policy)
    policy.reset_actions = (1, 2)
    assert policy.begin_episode(lambda a: sent.append(a) or f"obs after {a}") == "obs after 2" and sent == [1, 2]


def test_breakout_as_rl_zoo_runs_it(configs_dir):
    """The shipped Breakout config on the real ALE: FIRE at reset launches the ball, a lost life ends
    a training episode (the game goes on), evaluation plays on through it."""
    import os
    cfg = load_config(os.path.join(configs_dir, "ppo", "Breakout-v5.yaml")).env
    assert (cfg.atari.noop_max, cfg.atari.fire_reset, cfg.atari.episodic_life, cfg.atari.clip_reward) == \
        (30, True, True, True)
    train = make_env(cfg, training=True)
    train.reset(seed=0)
    steps, ended, info = 0, False, {}
    while not ended and steps < 5000:
        _, _, ended, _, info = train.step(0)  # NOOP: the launched ball is missed, a life is lost
        steps += 1
    assert ended and info["lives"] == 4
    train.reset()
    assert train.unwrapped.ale.lives() == 4  # not a new game
    evaluation = make_env(cfg)
    evaluation.reset(seed=0)
    for _ in range(steps + 50):
        _, _, ended, _, info = evaluation.step(0)
        assert not ended
    assert info["lives"] <= 4  # lives lost, the game went on (FIRE after each)
