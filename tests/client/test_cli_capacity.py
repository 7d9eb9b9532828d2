"""Issue 31, item 15 (ux-walk 2 #7): what a user needs before submitting, from the command line against a live
portal over HTTP: `gpuportal classes` (each class's key, product and free/total), `nodes` (free capacity per node),
`quota` (the team's guarantees, limits and units in use) and `usage` (GPU-hours per team and per member; admins:
every team)."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from click.testing import CliRunner
from django.utils import timezone

from accounts.models import APIToken
from gpuportal.cli import cli
from gpus.models import Node, ResourceClass
from gpus.reconcile import sync_inventory
from jobs.choices import JobState
from jobs.models import Job
from tests.factories import member

from .conftest import H100


def rows_of(output: str) -> list[list[str]]:
    """A table the CLI printed, as its cells (columns are separated by two or more spaces)."""
    return [re.split(r"\s{2,}", line.strip()) for line in output.strip().splitlines()]


def test_classes_lists_each_key_with_product_and_free_of_total(portal, gp):
    result = gp("classes")
    assert result.exit_code == 0, result.output
    head, *rows = rows_of(result.output)
    assert head[:4] == ["KEY", "PRODUCT", "KIND", "FREE/TOTAL"]
    shown = {row[0]: row for row in rows}
    for rc in ResourceClass.objects.filter(hidden=False):
        assert shown[rc.key][1] == rc.display_name
        assert shown[rc.key][3] == f"{rc.free}/{rc.total}"
    listed = json.loads(gp("classes", "--output", "json").output)
    assert {c["key"] for c in listed} == set(shown)
    # --available: only classes with something free now.
    free_only = {row[0] for row in rows_of(gp("classes", "--available").output)[1:]}
    assert free_only == {rc.key for rc in ResourceClass.objects.filter(hidden=False, free__gt=0)}


def test_nodes_shows_free_capacity_per_node(driven, gp, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(f"team: vision\nname: hold\nimage: nvcr.io/nvidia/pytorch:24.01-py3\ncommand: [sleep, '3600']\n"
                    f"resource_class: {H100}\ncount: 3\n")  # fmt: skip
    assert gp("submit", str(spec)).exit_code == 0
    for _ in range(5):
        driven.cycle()
    job = Job.objects.get()
    assert job.state == JobState.RUNNING, job.wait_message
    sync_inventory(driven.cluster)  # the reconciler's pass: what each node holds now
    result = gp("nodes")
    assert result.exit_code == 0, result.output
    head, *rows = rows_of(result.output)
    assert head[:4] == ["NODE", "PRODUCT", "STATE", "FREE"]
    shown = {row[0]: row for row in rows}
    node = Node.objects.get(name=job.node_name)
    allocatable = int(node.allocatable["nvidia.com/gpu"])
    assert shown[node.name][3] == f"{allocatable - 3}/{allocatable} nvidia.com/gpu"
    assert set(shown) == set(Node.objects.visible_to(job.owner).values_list("name", flat=True))


def test_quota_shows_the_teams_guarantees_limits_and_use(portal, gp):
    result = gp("quota")
    assert result.exit_code == 0, result.output
    head, *rows = rows_of(result.output)
    assert head == ["TEAM", "CLASS", "GUARANTEED", "LIMIT", "IN USE", "MONTHLY GPU-HOURS", "CLUSTER CAPS"]
    assert rows == [["vision", H100, "8", "16", "0", "-", "-"]]  # alice sees her team's only


def test_quota_shows_the_per_cluster_caps(portal, gp, people):
    from gpus.models import Cluster
    from jobs import actions

    Cluster.objects.create(name="cloud", connection="simulated")
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 8, 16, cluster_caps={"cloud": 4, "default": 12})
    head, *rows = rows_of(gp("quota").output)
    assert rows == [["vision", H100, "8", "16", "0", "-", "cloud=4, default=12"]]
    assert json.loads(gp("quota", "--output", "json").output)[0]["cluster_caps"] == {"cloud": 4, "default": 12}


@pytest.fixture
def history(portal, people):
    """Two days ago: alice held 2 H100s for 3 h and carol 1 for 5 h (vision); bob 4 for 1 h (nlp)."""
    carol = member(people["vision"])
    rc = ResourceClass.objects.get(key=H100)
    start = timezone.now().replace(hour=1, minute=0, second=0, microsecond=0) - timedelta(days=2)
    for team, owner, hours, count in (("vision", "alice", 3, 2), ("vision", carol, 5, 1), ("nlp", "bob", 1, 4)):
        Job.objects.create(
            team=people[team], owner=people[owner] if isinstance(owner, str) else owner, name="done", image="x/y:1",
            resource_class=rc, count=count, state=JobState.SUCCEEDED, node_name="gpu-h100-01", started_at=start,
            finished_at=start + timedelta(hours=hours),
        )  # fmt: skip
    return start.date().isoformat()


def test_usage_prints_the_teams_gpu_hours_and_each_members(portal, gp, history):
    result = gp("usage", "--start", history, "--end", history)  # alice is in one team: vision
    assert result.exit_code == 0, result.output
    assert f"GPU-hours from {history} to {history} (UTC)" in result.output
    teams, members = result.output.split("\n\n")[1:3]
    assert rows_of(teams)[1][:3] == ["vision", "11.0", "0.0"]
    assert [r[:3] for r in rows_of(members)[1:]] == [["vision", "alice", "6.0"], ["vision", "carol", "5.0"]]


def test_usage_for_every_team_is_an_admins_and_refused_to_others_saying_why(portal, gp, history, people):
    refused = gp("usage", "--team", "all", "--days", "7")
    assert refused.exit_code == 4
    assert "Only admins read every team's usage (team=all)" in refused.stderr
    _, admin_token = APIToken.issue(people["admin"], "cli usage")

    def as_admin(*args: str):
        return CliRunner().invoke(cli, ["--url", portal.url, "--token", admin_token, *args], catch_exceptions=False)

    result = as_admin("usage", "--team", "all", "--start", history, "--end", history)
    assert result.exit_code == 0, result.output
    teams = rows_of(result.output.split("\n\n")[1])
    assert [r[:2] for r in teams[1:]] == [["nlp", "4.0"], ["vision", "11.0"]]
    body = json.loads(as_admin("usage", "--team", "all", "--days", "7", "--output", "json").output)
    assert {(m["team"], m["user"]) for m in body["members"] if m["allocated_gpu_hours"]} == {
        ("vision", "alice"), ("vision", "carol"), ("nlp", "bob")
    }  # fmt: skip


def test_members_shows_the_fair_share_and_leads_set_weights(portal, gp, people):
    from jobs.models import MemberShare

    carol = member(people["vision"])
    MemberShare.objects.create(team=people["vision"], user=people["alice"], average_units=3.0)
    result = gp("members")
    assert result.exit_code == 0, result.output
    first, _, head, *rows = result.output.strip().splitlines()
    assert first == "Fair share among the members of team vision: on; use counts half after 1 h."
    assert re.split(r"\s{2,}", head.strip()) == ["MEMBER", "ROLE", "WEIGHT", "RECENT GPUS", "SHARE OF USE",
                                                 "USE ÷ SHARE"]  # fmt: skip
    # alice, the only member with use or work, has all the weight in play: exactly her share. Carol has none.
    assert [re.split(r"\s{2,}", r.strip()) for r in rows] == [
        ["alice", "lead", "1", "3.00", "100%", "1.0×"], ["carol", "member", "1", "0.00", "0%", "0.0×"],
    ]  # fmt: skip
    MemberShare.objects.create(team=people["vision"], user=carol, average_units=1.0)
    shown = [re.split(r"\s{2,}", r.strip()) for r in gp("members").output.strip().splitlines()[3:]]
    assert [row[-1] for row in shown] == ["1.5×", "0.5×"]  # 3 of 4 GPUs for half the weights; 1 of 4
    bad = gp("members", "--weight", "carol=0", "--weight", "dave=2")
    assert bad.exit_code != 0
    assert "The weight of carol is 0" in bad.output and "'dave' is not a member of team vision" in bad.output
    assert gp("members", "--weight", "carol").exit_code != 0  # not USER=WEIGHT
    ok = gp("members", "--weight", "carol=3", "--output", "json")
    assert ok.exit_code == 0, ok.output
    assert {m["user"]: m["weight"] for m in json.loads(ok.output)["members"]} == {"alice": 1.0, "carol": 3.0}
    assert MemberShare.objects.get(user=carol).weight == 3.0 and MemberShare.objects.get(user=carol).average_units == 1


def test_min_runtime_is_read_by_members_and_set_by_leads(portal, gp, people):
    shown = gp("min-runtime")
    assert shown.exit_code == 0, shown.output
    assert "Team vision: minimum runtime before preemption none" in shown.output
    assert gp("min-runtime", "--set", "-5").exit_code != 0  # refused by the command line itself
    too_long = gp("min-runtime", "--set", str(10**7))
    assert too_long.exit_code != 0 and "A whole number of seconds from 0 (none) to" in too_long.output
    ok = gp("min-runtime", "--set", "1800", "--output", "json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["min_runtime_seconds"] == 1800
    assert "1800 s (30 min)" in gp("min-runtime").output


def test_a_running_job_reports_a_checkpoint_from_the_command_line(portal, gp, people):
    from tests.factories import job_in_state

    job = job_in_state(people["alice"], JobState.RUNNING)
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(minutes=5))
    result = gp("jobs", "checkpoint", str(job.pk))
    assert result.exit_code == 0, result.output
    job.refresh_from_db()
    assert job.last_checkpoint_at is not None and f"Job #{job.pk}: last checkpoint" in result.output
    refused = gp("jobs", "checkpoint", str(job.pk), "--at", "yesterday")
    assert refused.exit_code != 0 and "at" in refused.output


def month_of(history: str) -> str:
    return history[:7]


def test_usage_prints_your_own_gpu_hours_by_class_and_month(portal, gp, history):
    result = gp("usage", "--month", month_of(history))
    assert result.exit_code == 0, result.output
    assert f"Usage {month_of(history)} (UTC), your jobs:" in result.output
    head, *rows = rows_of(result.output.split("\n\n")[1])
    assert head == [
        "MONTH", "TEAM", "USER", "CLASS", "GPU-HOURS", "JOBS", "BUSY", "IDLE", "PREEMPTED", "KWH", "J/GPU-H"
    ]  # fmt: skip
    assert rows == [[month_of(history), "vision", "alice", H100, "6.0", "1", "0.0", "0.0", "0.0", "-", "-"]]
    body = json.loads(gp("usage", "--month", month_of(history), "--output", "json").output)
    assert body["scope"] == "me" and body["rows"][0]["energy_kwh"] is None


def test_usage_of_a_team_shows_a_lead_every_member_and_every_team_only_to_an_admin(portal, gp, history, people):
    result = gp("usage", "--team", "vision", "--month", month_of(history), "--months", "2")
    assert result.exit_code == 0, result.output
    rows = rows_of(result.output.split("\n\n")[1])[1:]
    assert [r[1:5] for r in rows] == [["vision", "alice", H100, "6.0"], ["vision", "carol", H100, "5.0"]]
    people_table = rows_of(result.output.split("\n\n")[2])
    assert people_table[0][:3] == ["TEAM", "USER", "GPU-HOURS"] and len(people_table) == 3
    refused = gp("usage", "--all")
    assert refused.exit_code == 4 and "Only admins read every team's usage (team=all)" in refused.stderr
    other = gp("usage", "--team", "nlp")
    assert other.exit_code == 4 and "No team 'nlp' that you belong to" in other.stderr
    _, admin_token = APIToken.issue(people["admin"], "cli usage")
    every = CliRunner().invoke(cli, ["--url", portal.url, "--token", admin_token, "usage", "--all", "--month",
                                     month_of(history), "--output", "json"], catch_exceptions=False)  # fmt: skip
    assert every.exit_code == 0, every.output
    assert {(p["team"], p["user"]) for p in json.loads(every.output)["people"]} == {
        ("vision", "alice"), ("vision", "carol"), ("nlp", "bob")
    }  # fmt: skip


def test_usage_refuses_monthly_and_daily_options_together(portal, gp):
    result = gp("usage", "--month", "2026-11", "--days", "7")
    # click's usage error (the console script, gpuportal.cli.main, exits 64 for it).
    assert result.exit_code == 2 and "--month and --months are for the monthly report" in result.output


def test_free_lists_free_units_per_class_and_cluster(portal, gp):
    result = gp("free")
    assert result.exit_code == 0, result.output
    head, *rows = rows_of(result.output)
    assert head == ["CLASS", "PRODUCT", "CLUSTER", "FREE", "TOTAL"]
    expected = {rc.key: rc.free for rc in ResourceClass.objects.filter(hidden=False, free__gt=0)}
    assert expected and {row[0]: int(row[3]) for row in rows} == expected  # one cluster: the class's free units
    assert {row[2] for row in rows} == {"default"}
    one = sorted(expected)[0]
    only = json.loads(gp("free", "--class", one, "--output", "json").output)
    assert [(r["class"], r["cluster"], r["free"]) for r in only] == [(one, "default", expected[one])]
