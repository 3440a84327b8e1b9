"""The seeded simulation of a fleet run (not shipped in the wheel): simulation.py is the model
(the real core, virtual time, a faulty network), invariants.py what it checks beyond the core's,
scale.py the scale scenario, cli.py the command line (`python -m tools.sim`), golden.py records
the golden logs that tests/golden replays."""
