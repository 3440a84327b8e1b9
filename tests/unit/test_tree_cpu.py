"""The benches count a system's CPU over its process tree (`tools.bench.harness.tree_cpu`): a
child that ran inside a window and was reaped before its end counts (through the parent's
cutime), as the coordinator's snapshot processes must; a living child counts too. CPU time,
not wall time: the burner spins until its own process_time reaches its share."""
from __future__ import annotations

import subprocess
import sys

from tools.bench.harness import tree_cpu

BURN_S = 0.4
PARENT = f"""
import subprocess, sys
sys.stdin.readline()  # the first reading is taken
subprocess.run([sys.executable, "-c", "import time\\nt = time.process_time()\\nwhile time.process_time() - t < {BURN_S}: pass"])
print("reaped", flush=True)
sys.stdin.readline()  # the second reading is taken
"""


def test_a_child_reaped_inside_the_window_counts_in_its_parents_tree():
    p = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        before = tree_cpu([p.pid])
        p.stdin.write("go\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "reaped"
        after = tree_cpu([p.pid])
        p.stdin.write("end\n")
        p.stdin.flush()
        assert p.wait(30) == 0
    finally:
        if p.poll() is None:
            p.kill()
    assert after - before >= BURN_S * 0.9, (before, after)  # utime+stime alone would miss it


def test_a_living_child_counts_and_a_gone_pid_counts_nothing():
    burner = f"import time\nt = time.process_time()\nwhile time.process_time() - t < {BURN_S}: pass\nprint('burnt', flush=True)\ntime.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {burner!r}])"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "burnt"  # the grandchild's output, inherited
        assert tree_cpu([parent.pid]) >= BURN_S * 0.9
    finally:
        subprocess.run(["pkill", "-P", str(parent.pid)], check=False)  # the sleeping child first
        parent.kill()
        parent.wait(30)
    assert tree_cpu([1 << 22]) == 0.0  # pid_max's ceiling: no process has this pid
