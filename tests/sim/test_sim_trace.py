"""Trace files: the CSV format, the Philly loader, and bad files rejected with the line
number and the reason."""

from __future__ import annotations

import gzip

import pytest

from raygang.sim.philly import load_philly, proportional_nodes
from raygang.sim.trace import TraceError, gang_shape, load_csv

GOOD = """submit_s,duration_s,gpus,queue,priority,name
0,3600,8,team-a,,resnet
30,600,32,team-b,batch,bert
45,60,1,team-a,250,tiny
"""


def write(tmp_path, text: str, name: str = "trace.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_good_file_is_read_in_submission_order_with_gang_shapes(tmp_path):
    trace = load_csv(write(tmp_path, GOOD))
    assert [j.name for j in trace.jobs] == ["resnet", "bert", "tiny"]
    bert = trace.jobs[1]
    assert (bert.members, bert.gpus_per_member, bert.priority) == (4, 8, "batch")
    assert trace.jobs[2].priority == 250 and trace.jobs[0].priority == "training"
    assert trace.queues == ["team-a", "team-b"]


def test_an_explicit_shape_is_taken_as_given(tmp_path):
    trace = load_csv(write(tmp_path, "submit_s,duration_s,shape,queue\n0,10,2x4,q\n"))
    assert (trace.jobs[0].members, trace.jobs[0].gpus_per_member) == (2, 4)


def test_a_measured_start_time_is_read_per_job_and_may_be_left_empty(tmp_path):
    trace = load_csv(write(tmp_path, "submit_s,duration_s,gpus,queue,name,start_s\n"
                                     "0,10,1,q,slow,4.5\n1,10,1,q,usual,\n"))
    assert {j.name: j.start_s for j in trace.jobs} == {"slow": 4.5, "usual": None}


@pytest.mark.parametrize(("text", "line", "reason"), [
    ("submit_s,gpus,queue\n0,1,a\n", 1, "missing column(s): duration_s"),
    ("submit_s,duration_s,queue\n0,1,a\n", 1, "missing column(s): gpus (or shape)"),
    ("submit_s,duration_s,gpus,queue\n0,10,1,a\n5,-3,1,a\n", 3, "duration_s: Input should be "
     "greater than 0"),
    ("submit_s,duration_s,gpus,queue\n0,10,1,a\n5,3,1,nobody\n", 3, "unknown tenant 'nobody'"),
    ("submit_s,duration_s,gpus,queue\nsoon,10,1,a\n", 2, "submit_s: not a number: 'soon'"),
    ("submit_s,duration_s,gpus,queue\n0,10,0,a\n", 2, "gpus: expected a whole number >= 1"),
    ("submit_s,duration_s,shape,queue\n0,10,8by4,a\n", 2, "shape: expected MEMBERSxGPUS"),
    ("submit_s,duration_s,gpus,queue,start_s\n0,10,1,a,-1\n", 2, "start_s: Input should be "
     "greater than or equal to 0"),
    ("submit_s,duration_s,gpus,queue,name\n0,1,1,a,x\n1,1,1,a,x\n", 3, "job 'x' appears twice"),
])
def test_a_bad_file_is_rejected_with_the_line_and_the_reason(tmp_path, text, line, reason):
    path = write(tmp_path, text)
    with pytest.raises(TraceError) as caught:
        load_csv(path, queues=["a"])
    assert caught.value.line == line
    assert reason in caught.value.reason
    assert str(caught.value).startswith(f"{path}:{line}: ")


def test_jobs_over_a_node_become_gangs_of_whole_nodes():
    assert gang_shape(1, 8) == (1, 1)
    assert gang_shape(8, 8) == (1, 8)
    assert gang_shape(12, 8) == (2, 8)  # rounded up to whole nodes
    assert gang_shape(64, 8) == (8, 8)


def test_quotas_are_whole_nodes_in_proportion_adding_up_to_the_cluster():
    given = proportional_nodes({"a": 64, "b": 32, "c": 8, "d": 8}, 10)
    assert sum(given.values()) == 10
    # Floors 5, 2, 0, 0; the three nodes left go to the largest remainders (b, then a
    # and c tied with d: by name).
    assert given == {"a": 6, "b": 3, "c": 1, "d": 0}


PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-01 23:59:00,100.0,1,100.0,aa
2017-10-02 00:00:10,3600.0,16,57600.0,aa
2017-10-02 01:00:00,60.0,2,120.0,bb
2017-10-02 02:00:00,60.0,1,60.0,tiny
2017-10-03 00:00:00,60.0,1,60.0,bb
"""


def test_the_philly_loader_keeps_the_window_maps_vcs_to_queues_and_scales_quotas(tmp_path):
    jobs = tmp_path / "philly.csv.gz"
    with gzip.open(jobs, "wt") as out:
        out.write(PHILLY)
    (tmp_path / "philly_vc_nodes.csv").write_text("vc,node num\naa,30\nbb,10\n")
    trace = load_philly(jobs, start="2017-10-02", days=1, nodes=4)
    assert [(j.submit_s, j.members, j.gpus_per_member, j.queue) for j in trace.jobs] == [
        (10.0, 2, 8, "aa"), (3600.0, 1, 2, "bb")]
    assert trace.quotas == {"aa": 24, "bb": 8}  # 3 and 1 of the 4 nodes, in GPUs
    assert any("1 jobs of VCs without a node count dropped" in n for n in trace.notes)
    assert "CC BY 4.0" in trace.attribution and trace.start == "2017-10-02 00:00:00"


def test_a_philly_file_without_its_columns_is_rejected(tmp_path):
    path = write(tmp_path, "timestamp,duration\n2017-10-02 00:00:00,1\n", "p.csv")
    with pytest.raises(TraceError, match=r"p.csv:1: missing column\(s\): num_gpus, cluster"):
        load_philly(path)


def test_the_shipped_week_is_the_philly_week_with_its_attribution():
    from raygang.sim.cli import SHIPPED_WEEK

    trace = load_philly(SHIPPED_WEEK, nodes=80)
    assert len(trace.jobs) == 11_386
    assert sum(trace.quotas.values()) == 80 * 8
    source = (SHIPPED_WEEK.parent / "SOURCE.txt").read_text()
    assert "CC BY 4.0" in source and "arxiv.org/abs/1901.05758" in source
