"""strategies.mirror.joint_instances meets what it promises (the instances of MD-JOINT and
MD-JOINT-TIGHT): n = 2–3 inputs of T = 2–4 tokens in d = 2–3, the query of each input its
first token, labels ±1 of both signs, reproducible from its seed, and replayable."""

import json

import torch
from hypothesis import given, settings

from strategies.mirror import joint_data, joint_instances
from theorems.framework import instances


@settings(max_examples=30, deadline=None)
@given(inst=joint_instances())
def test_joint_instances_meet_the_recipe(inst):
    assert 2 <= inst.n <= 3 and 2 <= inst.T <= 4 and 2 <= inst.d <= 3
    assert torch.equal(inst.Z, inst.X[:, 0])
    assert set(inst.y.tolist()) == {-1.0, 1.0}
    again = joint_data(inst.n, inst.T, inst.d, inst.seed)
    assert torch.equal(again.X, inst.X) and torch.equal(again.y, inst.y)


def test_a_joint_instance_replays_losslessly():
    inst = joint_data(3, 4, 3, seed=7)
    back = instances.decode(json.loads(json.dumps(instances.encode(inst))))
    assert torch.equal(back.X, inst.X) and torch.equal(back.Z, inst.Z) and back.seed == 7
    assert back.meta == {"joint": True}
