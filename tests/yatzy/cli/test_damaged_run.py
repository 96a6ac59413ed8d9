"""`yz run --resume` over a damaged run file: one line naming the file, nothing lost."""

from __future__ import annotations

from tests.in_process import yz_here as _yz
from tests.yatzy.train.test_init_from import SMOKE


def test_a_garbage_seed_set_stops_the_gate_with_one_line(tmp_path) -> None:
    out = tmp_path / "run"
    first = _yz("run", "--config", str(SMOKE), "--out", str(out), "--set", "run.iterations=1")
    assert first.returncode == 0, first.stderr
    seed_set = out / "gate" / "seedsets" / "dev-v1.json"
    for garbage in (b"{not json", b"[1, 2]", b'{"schema_version": 1, "name": "dev-v1"}'):
        seed_set.write_bytes(garbage)
        result = _yz("run", "--out", str(out), "--resume", "--set", "run.iterations=2")
        assert result.returncode == 2, result.stderr
        # Progress lines go to stderr as well; the error is its last line, and the only one.
        last = result.stderr.strip().splitlines()[-1]
        assert "Traceback" not in result.stderr and result.stderr.count("error") <= 1
        assert "dev-v1.json is damaged" in last and "delete it" in last
    seed_set.unlink()  # as the message says: re-created from its name, and the run goes on
    result = _yz("run", "--out", str(out), "--resume", "--set", "run.iterations=2")
    assert result.returncode == 0, result.stderr
    assert "iteration 2/2 took" in result.stdout


def test_gate_refuses_a_candidate_of_another_search_kind_as_train_does(tmp_path) -> None:
    from leaguezero.yatzy.agents.registry import PRETRAINED_PATH

    # configs/yatzy_smoke.yaml is a PUCT config; the pretrained network is a turn-search one.
    result = _yz("gate", "--config", str(SMOKE), "--best", str(PRETRAINED_PATH), "--cand",
                 str(PRETRAINED_PATH), "--seed-sets", str(tmp_path / "seeds"))  # fmt: skip
    assert result.returncode == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "turn-search network" in lines[0], result.stderr
    trained = _yz("train", "--config", str(SMOKE), "--best", str(PRETRAINED_PATH), "--replay",
                  str(tmp_path), "--out", str(tmp_path / "c.pt"))  # fmt: skip
    assert trained.returncode == 2 and "turn-search network" in trained.stderr
