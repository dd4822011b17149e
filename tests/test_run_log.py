"""A run's record (safety_net/run_log.py): log.csv's rows, loss.png, and the speed and time left train.py prints.
Each test here was missing until a hunt changed a line of run_log.py and no test failed."""

import os
import types

from safety_net import run_log
from safety_net.run_log import CsvLog, Speed, format_duration, plot_run, read_rows


def eval_rows(n):
    return [dict(iter=str(i), kind="eval", loss="2.0", val_loss=str(3 - i / 10)) for i in range(n)]


def test_loss_png_that_cannot_be_written_is_a_note_not_a_lost_run(tmp_path, capsys):
    """out_dir/loss.png a folder: the run ended in `error: cannot write .../loss.png` after its checkpoints, its
    "done:" line and train()'s summary lost (atomic_open's UserError passed plot_run's except)."""
    path = tmp_path / "loss.png"
    path.mkdir()
    plot_run(eval_rows(3), str(path), "t")
    assert capsys.readouterr().out.startswith(f"note: {path} not written")


def test_no_curve_writes_no_figure(tmp_path):
    plot_run([], str(tmp_path / "loss.png"), "t")
    assert not (tmp_path / "loss.png").exists()
    plot_run(eval_rows(2), str(tmp_path / "loss.png"), "t")
    assert (tmp_path / "loss.png").stat().st_size > 0


def test_read_rows_leaves_out_rows_train_py_never_writes(tmp_path, capsys):
    """An edited log.csv: a row of another kind, branch weights or an iteration that are not numbers, is left out
    with a note (an audit: a row of a wrong iteration went without a word)."""
    path = tmp_path / "log.csv"
    path.write_text("iter,kind,loss,branch_weights\n0,train,1.0,\nabc,train,1.0,\n1,bogus,1.0,\n2,train,1.0,x y\n"
                    "3,eval,0.5,0.4 0.6\n")
    assert [row["iter"] for row in read_rows(str(path))] == ["0", "3"]
    assert "left out 3 row(s) whose values are not numbers (line 3 first)" in capsys.readouterr().out


def test_a_committed_log_has_the_usual_permissions(tmp_path):
    """A pending log (a new run in a folder of earlier checkpoints) is a mkstemp file, 0600; once committed it is
    log.csv with the permissions any file gets (the umask's), as atomic_open gives them."""
    path = tmp_path / "log.csv"
    umask = os.umask(0o022)
    try:
        log = CsvLog(str(path), pending=True)
        log.write(iter=0, kind="train", loss=1.0)
        log.commit()
        log.close()
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644


def test_format_duration():
    assert format_duration(3725.9) == "1:02:05"
    assert format_duration(-5) == "0:00:00"   # a clock that went back is no time left, not "-1:59:55"


def test_speed_leaves_evaluations_out_of_ms_per_iter_and_counts_them_in_the_time_left(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(run_log, "time", types.SimpleNamespace(time=lambda: now[0]))
    speed = Speed(max_iters=100, eval_interval=10, tokens_per_iter=1000)
    speed.restart(0)
    speed.eval_started()
    now[0] += 5.0
    speed.eval_ended(0)   # 5 s per evaluation
    eval_s = 5.0

    def window(iter_num, seconds):
        now[0] += seconds
        return speed.log_window(iter_num)

    # 10 iterations in 10 s: 1000 ms/iter; 90 left and 90 // 10 + 1 evaluations still to come (the last one's too)
    numbers, eta = window(10, 10.0)
    assert numbers == dict(ms_per_iter=1000.0, tokens_per_s=1000.0)
    assert eta == format_duration(90 * 1.0 + 10 * eval_s)
    # the first two windows warm up: the smoothed speed starts again from the second one
    numbers, eta = window(20, 1.0)
    assert numbers["ms_per_iter"] == 100.0 and eta == format_duration(80 * 0.1 + 9 * eval_s)
    window(30, 1.0)
    _, eta = window(40, 2.0)   # 200 ms/iter, smoothed: 0.9 * 100 + 0.1 * 200
    assert eta == format_duration(60 * 0.110 + 7 * eval_s)
    # the summary: the median of the windows after the first (which held the warm-up): 100, 100, 200
    assert speed.summary() == (100.0, 1000 / 0.1)


def test_speed_summary_of_no_window():
    assert Speed(max_iters=10, eval_interval=5, tokens_per_iter=100).summary() == (None, None)
