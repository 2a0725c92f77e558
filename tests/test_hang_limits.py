"""Time limits in tests are hang detectors (issue 68): ten times the step's usual time, stretched by
CONSTRAINED_SFT_TEST_TIME_SCALE, and a fired one says so, with the command and its output, instead of a bare
`TimeoutExpired` traceback."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_FACTOR, TIME_SCALE_VARIABLE, hang_limit, hang_message

TESTS = Path(__file__).resolve().parent


def test_a_limit_is_ten_times_the_usual_time_and_scales(monkeypatch):
    monkeypatch.delenv(TIME_SCALE_VARIABLE, raising=False)
    assert hang_limit(30) == 30 * HANG_FACTOR and hang_limit(1) == 60  # at least a minute
    monkeypatch.setenv(TIME_SCALE_VARIABLE, "3")
    assert hang_limit(30) == 900
    assert "~30 s" in hang_message(900, "`x`") and f"{TIME_SCALE_VARIABLE}=3" in hang_message(900, "`x`")
    for bad in ("fast", "abc", "0", "-1", "inf", "nan", "1e-9", "5e-324", "1e308", "0.4", "101"):
        monkeypatch.setenv(TIME_SCALE_VARIABLE, bad)
        with pytest.raises(pytest.UsageError, match=f"{TIME_SCALE_VARIABLE}='{bad}': give a number from 0.5 to 100"):
            hang_limit(1)


@pytest.mark.parametrize("bad", ["abc", "1e-9", "1e308"])
def test_a_bad_time_scale_stops_the_session_before_any_test(tmp_path, bad):
    """Checked when the session starts: one line and no test run (was: `abc` failed inside a test, `1e-9` made every
    limit fire as a hang, `1e308` raised OverflowError)."""
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_nothing.py").write_text("def test_runs():\n    assert False, 'ran'\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                             str(tmp_path / "test_nothing.py")], capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, TIME_SCALE_VARIABLE: bad}, timeout=hang_limit(6))  # fmt: skip
    assert result.returncode == 4 and "ran" not in result.stdout, result.stdout + result.stderr
    assert f"{TIME_SCALE_VARIABLE}='{bad}': give a number from 0.5 to 100" in result.stdout + result.stderr


def test_a_fired_limit_is_reported_as_one(tmp_path):
    """A test whose subprocess outlives its limit fails with the hang message, the command and its output."""
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_sleeper.py").write_text(
        "import subprocess, sys\n\n"
        "def test_sleeps():\n"
        "    subprocess.run([sys.executable, '-c', 'import time; print(\"working\", flush=True); time.sleep(30)'],\n"
        "                   capture_output=True, text=True, timeout=0.5)\n"
    )
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                             str(tmp_path / "test_sleeper.py")], capture_output=True, text=True, cwd=tmp_path,
                            timeout=hang_limit(6))  # fmt: skip
    assert result.returncode == 1
    assert "still ran after 0.5 s, 10x what it takes on 2 quiet cores (~0.05 s)" in result.stdout, result.stdout
    assert "time.sleep(30)" in result.stdout and "working" in result.stdout


def test_a_build_lock_left_by_a_killed_process_is_removed_and_a_held_one_kept(tmp_path):
    """The C++ extension lock a killed process leaves (CI's DeepSpeed tests each waited 600 s on one) is removed
    before a DeepSpeed launch; one a live process holds (a build under way) is kept."""
    import signal

    from conftest import clear_stale_build_locks

    take = "from torch.utils.file_baton import FileBaton; import sys, time; FileBaton(sys.argv[1]).try_acquire(); " \
           "print('held', flush=True); time.sleep(600)"  # fmt: skip
    locks = {name: tmp_path / name / "lock" for name in ("killed", "building")}
    holders = {}
    for name, lock in locks.items():
        lock.parent.mkdir()
        holders[name] = subprocess.Popen([sys.executable, "-c", take, str(lock)], stdout=subprocess.PIPE, text=True)
        assert holders[name].stdout.readline() == "held\n"
    holders["killed"].send_signal(signal.SIGKILL)
    holders["killed"].wait()
    try:
        assert locks["killed"].exists() and locks["building"].exists()
        with pytest.warns(UserWarning, match="no process held"):
            assert clear_stale_build_locks(tmp_path, recheck_s=0.1) == [locks["killed"]]
        assert not locks["killed"].exists() and locks["building"].exists()
    finally:
        holders["building"].kill()
        holders["building"].wait()
    with pytest.warns(UserWarning, match="no process held"):  # now its holder is gone too
        assert clear_stale_build_locks(tmp_path, recheck_s=0.1) == [locks["building"]]
