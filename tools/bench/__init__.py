"""The benchmarks (not shipped in the wheel): one file per bench, each run with
`python -m tools.bench.NAME` and saying what it measures at its top; harness.py is what they
share (processes stopped by pid, CPU from /proc, profiles, a real coordinator), clients.py the
raw Session clients that simulate workers, data/ the bench roots their workers run. The figures
and their history are in docs/benchmarks.md."""
