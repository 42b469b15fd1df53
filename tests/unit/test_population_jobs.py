"""How the parent of a ``--jobs`` population reads its group processes' exits, with stand-in group
processes (no training): a group whose members all finished is done whatever its process's exit
code (a signal forwarded while it was exiting after them kills it with -15), and the population is
then interrupted by the other groups, not failed."""
import json
import os
import signal

import pytest

from msrl_consistent.populations import GroupFailed
from msrl_consistent.populations import jobs as population_jobs
from msrl_consistent.run_context import TrainingInterrupted

STAND_IN = """
import os, signal, sys, time
run_dir, group = sys.argv[1], int(sys.argv[2])
done = os.path.join(run_dir, "b", "summary.json")
if group == 1:  # finishes its member, then is killed by SIGTERM on its way out
    with open(done, "w") as fh:
        fh.write("{}")
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
while not os.path.exists(done):  # checkpointed and stopped by the signal: 143
    time.sleep(0.02)
sys.exit(int(os.environ.get("STAND_IN_CODE", "143")))
"""


def population(tmp_path):
    for m in "ab":
        (tmp_path / m).mkdir()
    (tmp_path / "population.json").write_text(json.dumps(
        {"members": [{"run_dir": "a"}, {"run_dir": "b"}], "groups": [[0], [1]]}))
    return str(tmp_path)


def test_a_finished_group_killed_on_exit_is_done_and_the_population_interrupted(tmp_path, monkeypatch):
    monkeypatch.setattr(population_jobs, "GROUP_PROCESS", STAND_IN)
    with pytest.raises(TrainingInterrupted) as exc:
        population_jobs.run_groups(population(tmp_path), resume=False)
    assert exc.value.exit_code == 128 + signal.SIGTERM


def test_an_unfinished_group_with_an_error_fails_the_population(tmp_path, monkeypatch):
    monkeypatch.setattr(population_jobs, "GROUP_PROCESS", STAND_IN)
    monkeypatch.setenv("STAND_IN_CODE", "3")
    with pytest.raises(GroupFailed, match=r"group 0 \(a\) exited with code 3") as exc:
        population_jobs.run_groups(population(tmp_path), resume=False)
    assert exc.value.exit_code == 3
    assert os.path.isfile(os.path.join(tmp_path, "b", "summary.json"))
