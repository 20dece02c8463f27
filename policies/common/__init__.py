"""Code that more than one stage or system relies on; no policy lives here.

`policies/` keeps the core at its top level (the snapshot model and the decision
types, the stage protocols, the engine, free capacity, the registry, the
profiles) and one policy per file in each stage folder. A module that is
neither, because policies of two stages (or a policy and its runner) need it,
lives here:

- `oasis`: OASiS's prices, schedule search and state, shared by its admission
  and its scaling policy (`admission/oasis.py`, `scaling/oasis.py`).
- `pool`: the training side as one pool of GPUs, CPUs and memory, and the
  running jobs' holdings, shared by the scaling policies DRF, Optimus and Aryl
  and by DL2's featurizer (`learned/dl2/features.py`).
- `reclaim`: :func:`~policies.common.reclaim.run_reclaim`, which checks a reclaim
  request, asks the reclaim policy and re-checks its answer, for the API and the
  simulator alike (the reclaim decision's counterpart of the engine).

What the policies of one stage alone share stays in that stage's folder
(`reclaim/impact.py`).

Named `common` (as in stable-baselines3's `common/`) rather than `shared`, which
in this project names the data folder beside the repository (`shared/traces`,
`shared/perf`), or after one system, since `pool` serves several.
"""
