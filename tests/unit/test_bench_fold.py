"""tools/bench/fold.py runs end to end on a small run (one that settles before its log reaches a
snapshot: no decode figure), prints its figures as JSON, and removes the store it generated."""
from __future__ import annotations

import json
from pathlib import Path

from tools.bench import fold


def test_the_fold_bench_prints_its_figures_and_leaves_no_store(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(fold.tempfile, "tempdir", str(tmp_path))
    assert fold.main(["--cells", "300", "--repeats", "1"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["cells"] == 300
    assert out["decode_s"] is None
    for key in ("recovery_s", "summarize_s", "results_pages_s", "attempts_pages_s", "run_page_actor_s",
                "run_page_off_actor_s", "snapshot_process_peak_mb"):
        assert out[key] > 0, key
    assert out["rss_after_recovery_mb"] > 0
    assert list(tmp_path.iterdir()) == []  # the generated store is gone
