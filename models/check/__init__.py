"""What ``python -m theorems check INSTANCE.json`` answers (docs/instances.md).

``predict`` (prompt and embedding instances), ``cross_predict`` (cross-attention),
``joint_predict`` (joint (W, v) training of cross-attention), ``estimate`` (how long a check
will take, said before it starts) and ``precision`` (whether float64 still represents the
instance: the precision guard).

A module belongs here when it turns one validated instance into the plain-JSON answer of the
CLI, by composing problems, oracles and flows; the NTP domain's answer is
``models.ntp.predict``. Import modules by full name; this file imports nothing.
"""
