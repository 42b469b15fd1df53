"""A user's own environment at the front door: every form of env.id, kwargs, wrappers and packages,
the start-up check, and each bad input as one `msrl: error:` line with exit 2 naming its source."""
import gymnasium as gym
import pytest

from msrl_consistent.cli import main
from msrl_consistent.config import ConfigError, EnvConfig, load_config
from msrl_consistent.envs.check import check_env
from msrl_consistent.envs.make import env_spec, make_env
from msrl_consistent.envs.recipe import host_wrappers, recipe, wrapper_kind
from msrl_consistent.training import default_run_dir, resolve

USER_MODULE = '''
import gymnasium as gym
import numpy as np


class Good(gym.Env):
    def __init__(self, size=1, render_mode=None):
        self.size = size
        self.observation_space = gym.spaces.Box(-10, 10, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.obs(), {}

    def obs(self):
        return np.full(3, self.size, np.float32)

    def step(self, action):
        self.t += 1
        return self.obs(), 1.0, False, self.t >= 5, {}


class NanObs(Good):
    def obs(self):
        return np.array([0, np.nan, 0], np.float32) if getattr(self, "t", 0) > 2 else super().obs()


class NanReward(Good):
    def step(self, action):
        obs, _, term, trunc, info = super().step(action)
        return obs, float("nan"), term, trunc, info


class FourTuple(Good):
    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        return obs, reward, term or trunc, info


class ObsOnlyReset(Good):
    def reset(self, *, seed=None, options=None):
        return super().reset(seed=seed)[0]


class WrongShape(Good):
    def obs(self):
        return np.zeros(4, np.float32)


class Raises(Good):
    def __init__(self, **kwargs):
        raise RuntimeError("no hardware attached")


class Unbounded(Good):
    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)


def make_good(size=2):
    return Good(size)


def not_an_env():
    return 42


class Scale(gym.ObservationWrapper):
    def __init__(self, env, factor=1.0):
        super().__init__(env)
        self.factor = factor

    def observation(self, obs):
        return obs * self.factor


class Broken(gym.Wrapper):
    def __init__(self, env):
        raise ValueError("wrapper cannot start")


gym.register("UserGood-v0", entry_point=Good)
gym.register("UserGoodBig-v0", entry_point=Good, kwargs={"size": 5})
'''


@pytest.fixture(autouse=True)
def user_dir(tmp_path_factory, monkeypatch):
    """The current directory holds the user's module userenvs.py (written once: imports are cached)."""
    root = tmp_path_factory.getbasetemp() / "user-envs"
    if not root.exists():
        root.mkdir()
        (root / "userenvs.py").write_text(USER_MODULE)
    monkeypatch.chdir(root)
    return root


def error_line(capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.startswith("msrl: error: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("argv, words", [
    (["check-env", "userenvs:UserGod-v0"], ["no callable 'UserGod-v0'", "did you mean 'userenvs:UserGood-v0'"]),
    (["check-env", "CartPol-v1"], ["the command line", "did you mean 'CartPole-v1'", "module:EnvId"]),
    (["check-env", "no_such_user_module:Env-v0"], ["no module named 'no_such_user_module'", "current directory"]),
    (["check-env", "userenvs:Good", "--set", "env.kwargs.sizee=2"],
     ["--set", "env.kwargs.sizee", "did you mean 'size'", "parameters: size, render_mode"]),
    (["check-env", "UserGoodBig-v0", "--set", "env.packages=[userenvs]", "--set", "env.kwargs.bogus=1"],
     ["env.kwargs.bogus", "UserGoodBig-v0's constructor", "size, render_mode"]),
    (["check-env", "userenvs:Raises"], ["userenvs:Raises", "RuntimeError: no hardware attached"]),
    (["check-env", "userenvs:not_an_env"], ["returned int, expected a gymnasium.Env"]),
    (["check-env", "userenvs:Good", "--set", "env.wrappers=[{entry: 'userenvs:Broken'}]"],
     ["userenvs:Broken", "env.wrappers[0]", "ValueError: wrapper cannot start"]),
    (["check-env", "userenvs:Good", "--set", "env.wrappers=[{entry: 'userenvs:Scale', kwargs: {factr: 2}}]"],
     ["env.wrappers[0].kwargs.factr", "did you mean 'factor'"]),
    (["check-env", "userenvs:Good", "--set", "env.wrappers=[{entry: Scale}]"], ["expected module:Class"]),
    (["check-env", "userenvs:NanObs"], ["NaN or infinite", "step()"]),
    (["check-env", "userenvs:NanReward"], ["reward nan", "expected a finite number"]),
    (["check-env", "userenvs:FourTuple"], ["step() returned tuple of 4", "(observation, reward, terminated, truncated, info)"]),
    (["check-env", "userenvs:ObsOnlyReset"], ["reset() returned ndarray", "(observation, info dict)"]),
    (["check-env", "userenvs:WrongShape"], ["shape (4,)", "(3,)"]),
    (["check-env", "userenvs:Unbounded"], ["finite bounds"]),
])
def test_each_bad_environment_is_one_line_naming_what_was_found(capsys, argv, words):
    err = error_line(capsys, argv)
    missing = [w for w in words if w not in err]
    assert not missing, (missing, err)
    assert "mujoco" not in err.lower()  # the MuJoCo hint is for MuJoCo ids only


def test_train_names_the_option_a_bad_value_came_from(capsys, tmp_path):
    run = tmp_path / "run"
    err = error_line(capsys, ["train", "ppo", "--env", "userenvs:Good", "--set", "env.kwargs.sizee=1", "--run-dir", str(run)])
    assert "--set: key 'env.kwargs.sizee'" in err
    assert not run.exists()  # nothing trained, nothing left behind
    err = error_line(capsys, ["train", "ppo", "--env", "userenvs:Nope", "--run-dir", str(run)])
    assert err.startswith("msrl: error: --env: key 'env.id'")
    assert not run.exists()


def test_python_errors_name_the_python_arguments_not_set():
    with pytest.raises(ConfigError) as exc:
        resolve("ppo", env="userenvs:Good", overrides=["algo.n_steps=0"])
    assert "train() arguments" in str(exc.value) and "--set" not in str(exc.value)


def test_every_form_of_env_id_makes_the_environment():
    for env_id in ("UserGood-v0", "userenvs:UserGood-v0", "userenvs:Good", "userenvs:make_good"):
        cfg = load_config(None, [f"env.id={env_id}", "env.kwargs.size=3"], data={})
        env = make_env(cfg.env)
        assert env.reset(seed=0)[0].tolist() == [3.0, 3.0, 3.0], env_id
    # a registered variant's kwargs, the time limit on a callable's environment, the wrappers in order
    cfg = load_config(None, ["env.id=UserGoodBig-v0", "env.packages=[userenvs]"], data={})
    assert make_env(cfg.env).reset(seed=0)[0][0] == 5.0
    cfg = EnvConfig(id="userenvs:Good", max_episode_steps=2)
    env = make_env(cfg)
    env.reset(seed=0)
    assert env.step(0)[3] is False and env.step(0)[3] is True
    cfg = load_config(None, ["env.id=userenvs:Good", "env.wrappers=[{entry: 'userenvs:Scale', kwargs: {factor: 2}}, "
                                                      "{entry: 'userenvs:Scale', kwargs: {factor: 3}}]"], data={})
    assert make_env(cfg.env).reset(seed=0)[0][0] == 6.0
    assert env_spec(cfg.env).obs_dim == 3


def test_the_check_leaves_the_environment_usable_and_reports_the_spec():
    env = make_env(EnvConfig(id="userenvs:Good"))
    spec = check_env(env, "userenvs:Good")
    assert spec.discrete and spec.n_actions == 2 and spec.obs_dim == 3


def test_wrapper_kinds_decide_what_the_board_repeats():
    from gymnasium.wrappers import ClipAction, ClipReward, TimeAwareObservation, TimeLimit

    class Plain(gym.Wrapper):
        pass
    assert [wrapper_kind(c) for c in (TimeAwareObservation, ClipAction, ClipReward, TimeLimit, Plain, print)] == \
        ["observation", "action", "reward", "bookkeeping", "unknown", "unknown"]
    cfg = load_config(None, ["env.id=userenvs:Good", "env.wrappers=[{entry: 'gymnasium.wrappers:TimeLimit', kwargs: "
                                                     "{max_episode_steps: 3}}, {entry: 'userenvs:Scale'}]"], data={}).env
    assert [w["entry"] for w in host_wrappers(cfg)] == ["userenvs:Scale"]
    r = recipe(cfg)
    assert r["id"] == "userenvs:Good" and r["rebuildable"] and r["modules"]["userenvs"]["file"].endswith("userenvs.py")
    assert r["modules"]["gymnasium.wrappers"]["version"] == gym.__version__
    norm = load_config(None, ["env.wrappers=[{entry: 'gymnasium.wrappers:NormalizeObservation'}]"], data={}).env
    assert "env.normalize_obs" in host_wrappers(norm)[0]["in_cell"]


def test_config_keys_are_typed():
    with pytest.raises(ConfigError, match="env.kwargs' has value 3, expected a mapping"):
        load_config(None, ["env.kwargs=3"], data={})
    with pytest.raises(ConfigError, match=r"unknown key 'env.wrappers\[0\].entri'; did you mean"):
        load_config(None, ["env.wrappers=[{entri: 'a:B'}]"], data={})
    assert load_config(None, ["env.kwargs={a: [1, {b: null}]}"], data={}).env.kwargs == {"a": [1, {"b": None}]}


def test_default_run_dirs_are_portable_names():
    for env_id in ("myenv:GoToTarget-v0", "ALE/Breakout-v5", "my env:x y", "<python>:make.<locals>.<lambda>"):
        cfg = load_config(None, [], data={"env": {"id": env_id}})
        name = default_run_dir(cfg)
        assert name.startswith("runs/ppo-") and not set(name[len("runs/"):]) & set(": /<>"), name


def test_total_timesteps_rounded_up_is_said():
    from msrl_consistent.training import build_algorithm, resolve_with_origins, rounding_note

    cfg, origins = resolve_with_origins("ppo/CartPole-v1", None, 3000, ["algo.n_steps=128"], None, "--set")
    algo = build_algorithm(cfg, origins)
    assert algo.trained_timesteps() == 3072
    assert rounding_note(algo) == "total_timesteps 3000 is trained as 3072: whole units of 1024 steps"
