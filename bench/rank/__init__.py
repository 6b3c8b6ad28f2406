"""The per-rank side: what torchrun/horovodrun start on every rank.

These modules import only each other and the vocabulary the controller shares (`bench.spec`,
`bench.launcher_kinds`, `bench.shared`), never the controller (config, plan, launchers,
report), so a rank process loads no more than it runs; the controller imports none of them.
"""

from bench.shared.lifeline import arm_from_environment

arm_from_environment()  # first thing in a rank: it dies with its launcher (see lifeline)
