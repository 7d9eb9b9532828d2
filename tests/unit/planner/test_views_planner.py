"""The planner's pages: who sees them (admins and leads; others 404), the new-run form (every problem next to its
field, nothing typed lost, a good form makes an audited run), the run page (progress while it runs; the fidelity
figure first, scenarios side by side, per-team and per-class tables, charts, never-ran list, CSV, carve links),
and the carve page's prefill that those links open."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest

from core.models import AuditEvent
from gpus.models import NodeConfigOperation
from planner.choices import PlanState
from planner.models import PlanRun

from .run_results import results_for_teams


@pytest.mark.parametrize(("who", "status"), [("admin", 200), ("alice", 200), ("bob", 404), ("outsider", 404)])
def test_who_sees_the_pages(client, people, make_run, who, status):
    run = make_run()
    client.force_login(people[who])
    assert client.get("/planner/").status_code == status
    assert client.get(f"/planner/{run.pk}/").status_code == status
    assert client.get(f"/planner/{run.pk}/results.csv").status_code == status
    assert client.get("/planner/new/").status_code == (200 if who == "admin" else 404)
    assert client.post(f"/planner/{run.pk}/cancel/").status_code in ((302,) if who == "admin" else (404,))


@pytest.mark.parametrize(("who", "shown"), [("admin", True), ("alice", True), ("bob", False)])
def test_the_nav_link_is_for_admins_and_leads(client, people, who, shown):
    client.force_login(people[who])
    html = client.get("/").content.decode()
    assert ('href="/planner/"' in html) is shown


def form_data(**extra):
    data = {"w-range": "7", "o-preemption": "on", "o-borrowing": "on", "o-suggest": "0"}
    data.update(extra)
    return data


def test_the_form_shows_every_problem_next_to_its_field_and_keeps_what_was_typed(client, people, inventory):
    client.force_login(people["admin"])
    response = client.post(
        "/planner/new/",
        form_data(
            **{
                "w-range": "dates",
                "w-start": "",
                "o-suggest": "0",
                "p0-name": "Share the H100s",
                "p0-c0-type": "time_slicing",
                "p0-c0-nodes": ["gpu-h100-01"],
                "p0-c0-replicas": "2",
                "p0-c1-type": "mig",  # no nodes, no layout
                "p1-name": "share the h100s",
                "p1-c0-type": "quota",
                "p1-c0-team": str(people["vision"].pk),
                "p1-c0-guaranteed": "8",
                "p1-c0-limit": "4",
            }
        ),
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="plan-errors"' in html
    assert not PlanRun.objects.exists()
    form = response.context["form"]
    assert form.window.errors["start"]
    assert form.proposals[0].changes[1].errors["nodes"]
    assert form.proposals[1].errors["name"] == ["Proposal 1 has this name already."]
    assert form.proposals[1].changes[0].errors["class_id"] == ["Required."]
    assert form.proposals[1].changes[0].errors["limit"] == ["The limit cannot be below the guarantee."]
    # What was typed and picked is still there.
    assert 'value="Share the H100s"' in html and 'value="share the h100s"' in html
    assert re.search(r'<option value="gpu-h100-01"[^>]*selected', html)
    assert re.search(r'name="p1-c0-guaranteed" value="8"', html)


def test_a_field_that_cannot_be_read_does_not_hide_the_other_problems(client, people, inventory):
    client.force_login(people["admin"])
    response = client.post(
        "/planner/new/",
        form_data(**{
            "w-range": "dates", "w-start": "2026-11-30", "w-end": "2026-11-01",
            "p0-name": "x" * 61, "p0-c0-type": "time_slicing", "p0-c0-nodes": ["gpu-h100-01"], "p0-c0-replicas": "two",
            "p0-c1-type": "remove_nodes",
        }),
    )  # fmt: skip
    form = response.context["form"]
    assert not PlanRun.objects.exists()
    assert form.window.errors["start"] == ["The window must start before it ends."]
    assert form.proposals[0].errors["name"] == ["Ensure this value has at most 60 characters (it has 61)."]
    assert form.proposals[0].changes[0].errors["replicas"] == ["Enter a whole number."]  # once, not also "Required."
    assert form.proposals[0].changes[1].errors["nodes"]


def test_a_good_form_makes_a_run(client, people, inventory):
    client.force_login(people["admin"])
    response = client.post(
        "/planner/new/",
        form_data(
            **{
                "w-range": "14",
                "o-suggest": "2",
                "o-preemption": "",
                "p0-name": "Carve the A100s",
                "p0-c0-type": "mig",
                "p0-c0-nodes": ["gpu-a100-mig-01"],
                "p0-c0-per_gpu": "3g.40gb, 2x1g.10gb\n",
                "p0-c1-type": "add_nodes",
                "p0-c1-like": "gpu-h100-01",
                "p0-c1-count": "2",
                "p1-name": "Share every A10",
                "p1-c0-type": "time_slicing",
                "p1-c0-product": "NVIDIA-A10",
                "p1-c0-replicas": "2",
            }
        ),
    )
    run = PlanRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/planner/{run.pk}/"
    assert run.state == PlanState.QUEUED and run.options == {"preemption": False, "borrowing": True, "suggest": 2}
    first, second = run.proposals
    assert first["name"] == "Carve the A100s"
    assert first["changes"][0]["nodes"] == ["gpu-a100-mig-01"]
    assert first["changes"][0]["per_gpu"] == [{"3g.40gb": 1, "1g.10gb": 2}]
    assert first["changes"][1] == {"type": "add_nodes", "like": "gpu-h100-01", "count": 2}
    assert second["changes"][0]["nodes"] == ["gpu-a10-01"]  # every node of the product
    assert (run.window_end - run.window_start).days == 14
    assert AuditEvent.objects.filter(action="plan.create", object_id=str(run.pk)).exists()


def test_a_running_run_shows_progress_and_a_cancel_button(client, people, make_run):
    run = make_run(state=PlanState.RUNNING, results=None, progress=0.42, message="Replaying proposal 1 of 2")
    client.force_login(people["admin"])
    html = client.get(f"/planner/{run.pk}/").content.decode()
    assert 'data-testid="run-progress"' in html and f'data-plan-progress="/api/v1/planner/runs/{run.pk}/"' in html
    assert 'value="0.42"' in html and "Replaying proposal 1 of 2" in html
    assert 'data-testid="cancel-run"' in html
    client.force_login(people["alice"])
    assert 'data-testid="cancel-run"' not in client.get(f"/planner/{run.pk}/").content.decode()


def test_cancel_from_the_page(client, people, make_run):
    run = make_run(state=PlanState.QUEUED, results=None)
    client.force_login(people["admin"])
    client.post(f"/planner/{run.pk}/cancel/")
    run.refresh_from_db()
    assert run.state == PlanState.CANCELLED
    assert AuditEvent.objects.filter(action="plan.cancel", object_id=str(run.pk)).exists()


def test_results_fidelity_first_then_side_by_side_tables_charts_and_carve_links(client, people, make_run, inventory):
    run = make_run()
    client.force_login(people["admin"])
    html = client.get(f"/planner/{run.pk}/").content.decode()
    order = [
        html.index(f'data-testid="{t}"') for t in ("fidelity", "scenarios", "team-table", "class-table", "never-ran")
    ]
    assert order == sorted(order)
    assert "The baseline replay waits 10 s longer at the median" in html
    assert html.count('<svg class="chart"') == 3
    assert "MIG all-3g.40gb on gpu-a100-mig-01" in html and "MIG on gpu-a100-mig-01: 2×3g.40gb" in html
    assert "Asks 16 GPUs; no node has 16." in html and "Team nlp has no quota" in html
    assert f'href="/planner/{run.pk}/results.csv"' in html
    links = re.findall(r'<a href="([^"]+)" data-testid="carve-preview">', html)
    assert len(links) == 2
    preset, per_gpu = (urlparse(link.replace("&amp;", "&")) for link in links)
    assert preset.path == "/nodes/gpu-a100-mig-01/configure/"
    assert parse_qs(preset.query) == {"kind": ["mig"], "preset": ["all-3g.40gb"]}
    assert parse_qs(per_gpu.query) == {"kind": ["mig"], **{f"gpu_{i}": ["2x3g.40gb"] for i in range(8)}}


def test_a_lead_sees_their_teams_rows_only_and_no_carve_links(client, people, make_run):
    run = make_run()
    client.force_login(people["alice"])
    html = client.get(f"/planner/{run.pk}/").content.decode()
    assert f'data-team="{people["vision"].pk}"' in html and f'data-team="{people["nlp"].pk}"' not in html
    assert "Asks 16 GPUs" in html and "Team nlp has no quota" not in html
    assert 'data-testid="carve-preview"' not in html


def test_the_carve_page_previews_a_prefilled_layout_and_applies_nothing(client, people, inventory):
    client.force_login(people["admin"])
    url = "/nodes/gpu-a100-mig-01/configure/?kind=mig&preset=all-3g.40gb&apply=1&confirm=1"
    response = client.get(url)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="preview"' in html and "3g.40gb" in html
    assert response.context["plan"] is not None
    assert not NodeConfigOperation.objects.exists()
    per_gpu = client.get(
        "/nodes/gpu-a100-mig-01/configure/?kind=mig&" + "&".join(f"gpu_{i}=2x3g.40gb" for i in range(8))
    )
    assert per_gpu.context["plan"] is not None and not per_gpu.context["errors"]
    assert not NodeConfigOperation.objects.exists()


LONG_NAME = "Suggested 1: A100-80GB: 1 node(s) 5 GPU(s) 2×1g.10gb + 1×2g.20gb + 1×3g.40gb, 2 GPU(s) 2×3g.40gb"


def _table(html: str, testid: str) -> str:
    start = html.index(f'data-testid="{testid}"')
    return html[start : html.index("</table>", start)]


def _text(fragment: str) -> str:
    """What a fragment of HTML shows (its text, without tags and their attributes)."""
    return re.sub(r"<[^>]+>", " ", fragment)


def test_scenarios_are_named_by_short_labels_with_their_full_names_in_a_legend(client, people, make_run):
    """Issue 31, item 15: a suggested layout's whole name was a column header. Columns say a letter and a short
    name (the full one in the title), and a legend above the tables gives each letter its full name."""
    results = results_for_teams(people["vision"].pk, people["nlp"].pk)
    results["scenarios"][2]["name"] = LONG_NAME
    run = make_run(results=results)
    client.force_login(people["admin"])
    html = client.get(f"/planner/{run.pk}/").content.decode()
    legend = html[html.index('data-testid="scenario-legend"') :]
    legend = legend[: legend.index("</dl>")]
    for code, name in (("A", "baseline"), ("B", "3g everywhere"), ("C", LONG_NAME)):
        assert re.search(rf"<dt[^>]*>{code}</dt>\s*<dd[^>]*>{re.escape(name)}", legend), (code, legend)
    heads = _text(_table(html, "scenarios").split("</thead>")[0])
    assert "C" in heads and "Suggested 1" in heads
    assert "A100-80GB" not in heads, "the full name is not a column header"
    assert f'title="{LONG_NAME}"' in _table(html, "scenarios")


@pytest.mark.parametrize("testid", ["team-table", "class-table"])
def test_per_team_and_per_class_tables_keep_their_width_whatever_the_number_of_scenarios(
    client, people, make_run, testid
):
    """Issue 31, item 15: the per-team and per-class tables had four columns per scenario and ran past the page
    (up to eleven scenarios: baseline, five proposals, five suggestions). Each scenario is a row under its team
    (class) instead: six columns, however many scenarios."""
    results = results_for_teams(people["vision"].pk, people["nlp"].pk)
    results["scenarios"][2]["name"] = LONG_NAME
    extra = [dict(results["scenarios"][1], name=f"proposal {n}") for n in range(8)]
    results["scenarios"] += extra
    run = make_run(results=results)
    client.force_login(people["admin"])
    table = _table(client.get(f"/planner/{run.pk}/").content.decode(), testid)
    head, body = table.split("</thead>")
    assert head.count("<th ") == 6 and "colspan" not in head
    assert "A100-80GB" not in _text(head + body)
    groups = 2  # teams, or classes
    assert body.count("<tr") == groups * len(results["scenarios"])
    assert body.count('scope="rowgroup"') == groups


def test_a_carve_link_names_the_cluster_of_a_node_of_another_cluster():
    from planner.views import carve_links

    change = {"type": "mig", "nodes": ["east/gpu-a100-mig-01", "gpu-a100-mig-01", "east/gone"], "preset": "all-3g.40gb"}
    counts = {("east", "gpu-a100-mig-01"): 8, ("default", "gpu-a100-mig-01"): 8}
    east, home = carve_links(change, counts, "default")
    assert east["node"] == "east/gpu-a100-mig-01" and home["node"] == "gpu-a100-mig-01"
    east_url, home_url = urlparse(east["url"]), urlparse(home["url"])
    assert east_url.path == home_url.path == "/nodes/gpu-a100-mig-01/configure/"
    assert parse_qs(east_url.query) == {"cluster": ["east"], "kind": ["mig"], "preset": ["all-3g.40gb"]}
    assert parse_qs(home_url.query) == {"kind": ["mig"], "preset": ["all-3g.40gb"]}
