"""The Helios job log loader (HeliosData's cluster_log.csv, with one day's VC sizes as
quotas): which jobs it keeps, their shapes, the quotas, bad files rejected with the line,
and `raygang sim` replaying a log as it does a Philly file."""

from __future__ import annotations

import gzip

import pytest
from click.testing import CliRunner

from raygang.sim.cli import sim
from raygang.sim.helios import load_helios
from raygang.sim.trace import TraceError

HEADER = ("job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,"
          "duration,queue\n")
LOG = HEADER + """\
1,uA,vcA,1,1,1,COMPLETED,2020-09-01 00:00:10,2020-09-01 00:00:10,2020-09-01 01:00:10,3600,0
2,uB,vcB,0,4,1,COMPLETED,2020-09-01 00:01:00,2020-09-01 00:01:00,2020-09-01 00:02:40,100,0
3,uB,vcB,16,64,2,FAILED,2020-09-01 00:02:00,2020-09-01 00:05:00,2020-09-01 00:15:00,600,180
4,uA,vcA,8,8,2,CANCELLED,2020-09-01 00:03:00,2020-09-01 00:03:00,2020-09-01 00:04:00,60,0
5,uC,vcC,2,2,1,COMPLETED,2020-09-01 00:04:00,2020-09-01 00:04:00,2020-09-01 00:06:00,120,0
6,uA,vcA,4,4,1,FAILED,2020-09-01 00:05:00,2020-09-01 00:05:00,2020-09-01 00:05:00,0,0
7,uA,vcA,12,12,3,COMPLETED,2020-09-01 00:06:00,2020-09-01 00:06:00,2020-09-01 00:16:00,600,0
8,uA,vcA,10,10,1,COMPLETED,2020-09-01 00:07:00,2020-09-01 00:07:00,2020-09-01 00:08:00,60,0
9,uB,vcB,1,1,1,COMPLETED,2020-09-02 00:00:00,2020-09-02 00:00:00,2020-09-02 00:01:00,60,0
"""
SIZES = "date,vcA,vcB,total\n2020-08-31,8,8,16\n2020-09-01,24,8,32\n2020-09-03,8,24,32\n"


def write_log(tmp_path, text: str = LOG, sizes: str | None = SIZES, gz: bool = False):
    path = tmp_path / ("cluster_log.csv.gz" if gz else "cluster_log.csv")
    if gz:
        with gzip.open(path, "wt") as out:
            out.write(text)
    else:
        path.write_text(text)
    if sizes is not None:
        (tmp_path / "cluster_gpu_number.csv").write_text(sizes)
    return path


def test_the_loader_keeps_gpu_jobs_of_the_window_with_their_shapes_and_the_days_quotas(
        tmp_path):
    trace = load_helios(write_log(tmp_path, gz=True), start="2020-09-01", days=1, nodes=4)
    assert [(j.name, j.submit_s, j.members, j.gpus_per_member, j.queue, j.duration_s)
            for j in trace.jobs] == [
        ("helios-1", 10.0, 1, 1, "vcA", 3600.0),
        ("helios-3", 120.0, 2, 8, "vcB", 600.0),  # failed: it held its GPUs 600 s
        ("helios-4", 180.0, 2, 4, "vcA", 60.0),  # 8 GPUs on 2 nodes: 4 each
        ("helios-7", 360.0, 3, 4, "vcA", 600.0),
        ("helios-8", 420.0, 2, 8, "vcA", 60.0),  # 10 on "1 node" of 8: whole nodes
    ]
    # The sizes of the day it starts (24 and 8 GPUs) scaled to 4 nodes: 3 and 1
    assert trace.quotas == {"vcA": 24, "vcB": 8}
    notes = " | ".join(trace.notes)
    for note in ("1 CPU jobs skipped", "1 jobs that ran 0 s skipped",
                 "1 jobs of VCs without a size dropped", "GPUs on 2020-09-01 scaled to 4"):
        assert note in notes
    assert "CC BY 4.0" in trace.attribution and "SC'21" in trace.attribution
    assert trace.start == "2020-09-01 00:00:00"


@pytest.mark.parametrize(("start", "day", "quotas"), [
    ("2020-09-02", "2020-09-01", {"vcA": 24, "vcB": 8}),  # the latest day before it
    ("2020-09-03", "2020-09-03", {"vcA": 8, "vcB": 24}),
    ("2020-08-01", "2020-08-31", {"vcA": 16, "vcB": 16}),  # none before: the first
])
def test_the_quotas_are_the_vc_sizes_on_the_day_the_replay_starts(tmp_path, start, day,
                                                                  quotas):
    log = LOG + "10,uA,vcA,1,1,1,COMPLETED,2020-09-03 00:00:00,,,60,0\n"
    trace = load_helios(write_log(tmp_path, log), start=start, nodes=4)
    assert trace.quotas == quotas
    assert any(f"GPUs on {day}" in note for note in trace.notes)


def test_without_a_start_the_first_job_kept_starts_the_replay(tmp_path):
    log = HEADER + "1,uC,vcC,1,1,1,COMPLETED,2020-09-01 00:00:00,,,60,0\n" + LOG.split("\n", 1)[1]
    trace = load_helios(write_log(tmp_path, log), nodes=4)
    assert trace.start == "2020-09-01 00:00:10"  # vcC's job (no size) is dropped
    assert trace.jobs[0].submit_s == 0.0


def test_without_sizes_every_vc_is_kept_and_no_quota_is_set(tmp_path):
    trace = load_helios(write_log(tmp_path, sizes=None))
    assert trace.quotas == {}
    assert {j.queue for j in trace.jobs} == {"vcA", "vcB", "vcC"}
    assert trace.jobs[0].submit_s == 0.0  # the first submission starts the replay


@pytest.mark.parametrize(("text", "error"), [
    ("job_id,vc,gpu_num\n1,vcA,1\n", r"cluster_log.csv:1: missing column\(s\): "
                                      r"submit_time, duration"),
    (HEADER + "1,uA,vcA,x,1,1,COMPLETED,2020-09-01 00:00:10,,,3600,0\n",
     r"cluster_log.csv:2: bad row: invalid literal for int\(\)"),
    (HEADER + "1,uA,vcA,1,1,1,COMPLETED,2020-09-01 00:00:10,,,3600,0\n"
              "2,uA,vcA,1,1,1,COMPLETED,2020/09/01 00:00:20,,,60,0\n",
     r"cluster_log.csv:3: bad row: time data '2020/09/01 00:00:20'"),
    (HEADER + "1,uA,vcA,-2,1,1,COMPLETED,2020-09-01 00:00:10,,,3600,0\n",
     r"cluster_log.csv:2: gpu_num -2 and duration 3600 s: neither may be negative"),
    (HEADER + "1,uA,vc A!,1,1,1,COMPLETED,2020-09-01 00:00:10,,,3600,0\n",
     r"cluster_log.csv:2: vc: "),
    (HEADER + "2,uB,vcB,0,4,1,COMPLETED,2020-09-01 00:01:00,,,100,0\n",
     r"cluster_log.csv: no GPU jobs between the start and the end"),
])
def test_a_bad_log_is_rejected_with_the_line_and_the_reason(tmp_path, text, error):
    with pytest.raises(TraceError, match=error):
        load_helios(write_log(tmp_path, text, sizes=None))


def test_a_bad_sizes_file_is_rejected_with_the_line(tmp_path):
    with pytest.raises(TraceError, match=r"cluster_gpu_number.csv:3: expected a whole number"):
        load_helios(write_log(tmp_path, sizes="date,vcA,total\n2020-09-01,8,8\n"
                                               "2020-09-02,eight,8\n"))


def test_sim_replays_a_helios_log_and_reads_the_sizes_beside_it(tmp_path):
    path = write_log(tmp_path)
    result = CliRunner().invoke(sim, [str(path), "--nodes", "4", "--start", "2020-09-01",
                                      "--days", "1", "--policy", "raygang,static", "-q"])
    assert result.exit_code == 0, result.output
    assert "GPUs on 2020-09-01 scaled to 4 nodes" in result.output
    assert "Helios trace: SenseTime, CC BY 4.0" in result.output
    for policy in ("raygang", "static"):
        assert policy in result.output
    # A trace CSV takes none of the window options (a Helios log does)
    csv_trace = tmp_path / "t.csv"
    csv_trace.write_text("submit_s,duration_s,gpus,queue\n0,60,1,a\n")
    result = CliRunner().invoke(sim, [str(csv_trace), "--days", "1", "-q"])
    assert result.exit_code == 2
    assert "are for Philly and Helios traces" in result.output


def test_static_without_quotas_says_why_it_skipped_every_job(tmp_path):
    # No sizes file: no VC has a quota, so `static` has no partition to run anything on
    path = write_log(tmp_path, sizes=None)
    result = CliRunner().invoke(sim, [str(path), "--nodes", "4", "--start", "2020-09-01",
                                      "--days", "1", "--policy", "raygang,static", "-q"])
    assert result.exit_code == 0, result.output
    assert "static: 6 jobs skipped: no partition for queue(s) vcA, vcB, vcC (a partition" \
        in result.output
    assert "raygang: " not in result.output.replace("raygang sim", "")
