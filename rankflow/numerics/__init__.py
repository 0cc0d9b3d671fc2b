"""Numerics both families use: :mod:`.solve` (the one diffrax set-up), :mod:`.schedules`
(learning-rate schedules as functions of the step), :mod:`.batching` (how a batch of runs
is vmapped, mapped or sharded over devices) and :mod:`.linalg` (decompositions one matrix
at a time on CPU)."""
