"""The code behind every figure, table, model and example the docs cite.

Each module is a command, run from the repository root as `python -m evidence.NAME`
(each has its `make` target; `make help` lists them):

* `bench*`: speed and memory of the service, the engine and the simulator
  (docs/benchmarks.md);
* `evidence_*` and `make_results`: the tables of docs/results.md, each module owning a
  named section of it (`results_sections`);
* `train_*`: the shipped learned models under `policies/learned/*/default/`;
* `generate_*`: the example snapshots under `examples/`;
* `chaos`: faults and a soak under load (docs/reliability.md).

`runner` holds what they share. The package is installed with the project, but its
commands read and write the checkout (`examples/`, `docs/`, the shipped models) and
the shared data beside it, so they are meant to be run from a checkout.
"""
