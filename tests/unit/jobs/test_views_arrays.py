"""The pages of arrays, labels, working directory, "Resubmit with changes" and the priority change: the form
filled from a job, an array from the form, the grouped list with its summary, the label filter box, the array
page and its group cancel, and what a bad form says (every problem at once)."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import JobState, Priority
from jobs.forms import JobSubmitForm
from jobs.models import Job, JobArray
from tests.factories import member
from tests.sim_objects import H100


@pytest.fixture
def setup(inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    quota = actions.set_quota(people["admin"], people["vision"], rc, 4, 8)
    carol = member(people["vision"])
    return {**people, "rc": rc, "quota": quota, "carol": carol}


def form_data(setup, **overrides) -> dict:
    data = {
        "team": setup["vision"].pk, "name": "resnet", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "command": "python train.py --epochs 10", "args": "", "env": "EPOCHS=10", "resource_class": setup["rc"].pk,
        "count": 1, "cpu": "4", "memory_mb": 16384, "priority": 50, "max_runtime_hours": "1.5",
        "idempotency_key": "form-token-1",
    }  # fmt: skip
    data.update(overrides)
    return data


def test_the_form_stores_labels_and_working_dir(client, setup):
    client.force_login(setup["carol"])
    response = client.post(
        "/jobs/new/", form_data(setup, labels="git-sha=1a2b3c4\nexample.com/run=42", working_dir="/workspace")
    )
    job = Job.objects.get()
    assert response.status_code == 302
    assert job.labels == {"git-sha": "1a2b3c4", "example.com/run": "42"} and job.working_dir == "/workspace"
    page = client.get(job.get_absolute_url()).content.decode()
    assert "git-sha=1a2b3c4" in page and "/workspace" in page


def test_a_bad_form_shows_every_problem_at_once(client, setup):
    client.force_login(setup["carol"])
    response = client.post(
        "/jobs/new/",
        form_data(
            setup, labels="gpu-portal.io/team=x\nno-equals-sign", working_dir="relative", count=99,
            array_size=1000, array_parallelism=5,
        ),
    )  # fmt: skip
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert {"labels", "working_dir", "count", "array_size"} <= set(errors), errors
    assert "Line 2: write key=value." in errors["labels"]
    assert not Job.objects.exists()


def test_resubmit_with_changes_fills_the_form_from_every_spec_field(client, setup):
    fields = dict(
        name="sweep", image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["python", "t.py", "--lr", "0.1 0.2"],
        args=["--x"], env=[{"name": "A", "value": "1"}], count=2, cpu_millicores=1500, memory_mb=4096,
        priority=Priority.LOW, preemptible=False, max_runtime_seconds=5400, labels={"run": "7"}, working_dir="/w",
        checkpoint={"signal": "SIGUSR1", "grace_seconds": 90, "report": "api"},
    )  # fmt: skip
    job = actions.submit_job(setup["carol"], setup["vision"], setup["rc"], fields).job
    initial = JobSubmitForm.initial_from_job(job, actions.SUBMIT_FIELDS)
    # Every spec field has a place in the form.
    form_fields = JobSubmitForm(user=setup["carol"], teams=type(setup["vision"]).objects.all()).fields
    for spec in actions.SUBMIT_FIELDS:
        name = JobSubmitForm.SPEC_TO_FORM.get(spec, (spec,))[0]
        assert name in form_fields or name in JobSubmitForm.SPEC_OUTSIDE_FIELDS, spec
    mounts = [{"claim": "data", "mount_path": "/data", "read_only": True}]
    rows = JobSubmitForm(user=setup["carol"], teams=type(setup["vision"]).objects.all(), initial={"volumes": mounts})
    assert rows.volume_rows()[0] == mounts[0] | {"errors": []}
    client.force_login(setup["carol"])
    page = client.get(f"/jobs/new/?from={job.pk}")
    form = page.context["form"]
    assert form.initial["command"] == "python t.py --lr '0.1 0.2'" and form.initial["labels"] == "run=7"
    assert form.initial["cpu"] == 1.5 and form.initial["max_runtime_hours"] == 1.5
    assert form.initial == form.initial | initial
    assert f"Resubmit job #{job.pk} with changes" in page.content.decode()
    # Posting the form as it was filled, with one change, makes a new job linked to the old one.
    data = {name: value for name, value in initial.items() if value is not None and name not in ("preemptible",)} | {
        "team": setup["vision"].pk,
        "idempotency_key": "k2",
        "preemptible": "on",
    }
    response = client.post("/jobs/new/", data)
    new = Job.objects.exclude(pk=job.pk).get()
    assert response.status_code == 302 and new.resubmitted_from == job and new.preemptible
    assert actions.spec_of(new) | {"preemptible": False} == actions.spec_of(job)
    assert job.events.filter(kind="resubmitted").exists()


def test_a_teammates_job_is_not_copied_by_a_plain_member(client, setup):
    job = actions.submit_job(
        setup["alice"], setup["vision"], setup["rc"], {**form_fields_minimal(), "name": "alices"}
    ).job
    client.force_login(setup["carol"])
    page = client.get(f"/jobs/new/?from={job.pk}")
    assert page.context["source"] is None and "alices" not in page.context["form"].initial.values()


def form_fields_minimal() -> dict:
    return dict(
        name="x", image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["true"], count=1, cpu_millicores=1000,
        memory_mb=1024, priority=Priority.NORMAL, preemptible=False, max_runtime_seconds=3600,
    )  # fmt: skip


def test_the_waiting_advice_links_to_resubmit_as_preemptible(client, setup):
    job = actions.submit_job(setup["carol"], setup["vision"], setup["rc"], form_fields_minimal()).job
    Job.objects.filter(pk=job.pk).update(
        wait_reason="quota",
        wait_message="… only for preemptible jobs. It starts when the team's running jobs free enough, or resubmit "
        "it as preemptible (Resubmit with changes).",
    )
    client.force_login(setup["carol"])
    page = client.get(job.get_absolute_url()).content.decode()
    assert f'href="/jobs/new/?from={job.pk}&amp;preemptible=1"' in page
    form = client.get(f"/jobs/new/?from={job.pk}&preemptible=1").context["form"]
    assert form.initial["preemptible"] is True


def test_an_array_from_the_form_is_grouped_on_the_list_and_cancelled_as_a_group(client, setup):
    other = actions.submit_job(setup["carol"], setup["vision"], setup["rc"], form_fields_minimal()).job
    client.force_login(setup["carol"])
    response = client.post("/jobs/new/", form_data(setup, name="sweep", array_size=3, array_parallelism=2))
    array = JobArray.objects.get()
    assert response.status_code == 302 and response.url == array.get_absolute_url()
    assert (array.size, array.parallelism, array.tasks.count()) == (3, 2, 3)
    listing = client.get("/jobs/")
    rows = listing.context["rows"]
    header = rows[0]
    assert header.array == array and header.summary == "3 queued"
    assert [r.array_index for r in rows[1:4]] == [0, 1, 2] and rows[4] == other
    assert 'data-testid="array-group"' in listing.content.decode()
    page = client.get(array.get_absolute_url()).content.decode()
    assert "3 queued" in page and "Cancel array" in page
    client.force_login(setup["bob"])
    assert client.get(array.get_absolute_url()).status_code == 404
    assert client.post(f"/jobs/arrays/{array.pk}/cancel/").status_code == 404
    client.force_login(setup["carol"])
    assert client.post(f"/jobs/arrays/{array.pk}/cancel/").status_code == 302
    assert set(array.tasks.values_list("state", flat=True)) == {JobState.CANCELLED}
    assert Job.objects.get(pk=other.pk).state == JobState.QUEUED
    assert AuditEvent.objects.filter(action="job_array.cancel", object_id=str(array.pk)).count() == 1
    assert "3 cancelled" in client.get(array.get_absolute_url()).content.decode()


def test_the_list_page_filters_by_labels(client, setup):
    a = actions.submit_job(
        setup["carol"], setup["vision"], setup["rc"], form_fields_minimal() | {"labels": {"run": "a"}}
    )
    actions.submit_job(setup["carol"], setup["vision"], setup["rc"], form_fields_minimal() | {"labels": {"run": "b"}})
    client.force_login(setup["carol"])
    page = client.get("/jobs/?label=run=a")
    assert [row.pk for row in page.context["rows"]] == [a.job.pk]
    assert 'value="run=a"' in page.content.decode()


def test_the_priority_form_on_the_job_page(client, setup, settings):
    settings.PORTAL_MEMBER_MAX_PRIORITY = "normal"
    job = actions.submit_job(setup["carol"], setup["vision"], setup["rc"], form_fields_minimal()).job
    client.force_login(setup["carol"])
    page = client.get(job.get_absolute_url())
    assert [v for v, _ in page.context["priority_choices"]] == [Priority.LOW, Priority.NORMAL]
    client.post(f"/jobs/{job.pk}/priority/", {"priority": Priority.HIGH})
    assert Job.objects.get(pk=job.pk).priority == Priority.NORMAL
    client.post(f"/jobs/{job.pk}/priority/", {"priority": Priority.LOW})
    assert Job.objects.get(pk=job.pk).priority == Priority.LOW
    assert AuditEvent.objects.filter(action="job.priority").count() == 1


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Regions(HTMLParser):
    """Each element's source text with the data-live names of the live regions around it (for the checks on
    what portal.js swaps on a poll)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.html, self.lines = html, [0]
        for line in html.splitlines(keepends=True):
            self.lines.append(self.lines[-1] + len(line))
        self.open: list[tuple[str, dict, int]] = []
        self.elements: list[tuple[dict, list[str], str]] = []  # (attributes, live names around it, source)
        self.feed(html)

    def _offset(self) -> int:
        line, column = self.getpos()
        return self.lines[line - 1] + column

    def handle_starttag(self, tag, attrs):
        if tag in VOID:
            return
        self.open.append((tag, dict(attrs), self._offset()))

    def handle_endtag(self, tag):
        while self.open:
            name, attrs, start = self.open.pop()
            if name == tag:
                end = self.html.index(">", self._offset()) + 1
                around = [a["data-live"] for _, a, _ in self.open if "data-live" in a]
                self.elements.append((attrs, around, self.html[start:end]))
                return


def _live_region(html: str, name: str) -> str:
    """The source of the element with data-live="<name>" (what portal.js swaps on a poll)."""
    [source] = [text for attrs, _, text in _Regions(html).elements if attrs.get("data-live") == name]
    return source


def test_live_polls_keep_the_array_grouping_and_the_array_page_refreshes_itself(client, setup):
    client.force_login(setup["carol"])
    client.post("/jobs/new/", form_data(setup, name="sweep", array_size=2, labels="run=7"))
    array = JobArray.objects.get()
    # The job list's poll (the same address, with its filter) answers the grouped rows in the swapped region.
    poll = client.get("/jobs/?label=run=7", headers={"X-Live": "1"}).content.decode()
    rows = _live_region(poll, "rows")
    assert 'data-testid="array-group"' in rows and "2 queued" in rows
    assert rows.count(f'data-array-task="{array.pk}"') == 2
    # The array page polls while a task can still change, and its summary, tasks and actions are live regions.
    page = client.get(array.get_absolute_url()).content.decode()
    assert "data-live-every" in page
    assert "2 queued" in _live_region(page, "summary") and "Cancel array" in _live_region(page, "actions")
    assert _live_region(page, "tasks").count("data-job=") == 2
    actions.cancel_array(setup["carol"], array)
    page = client.get(array.get_absolute_url()).content.decode()
    assert "data-live-every" not in page and "2 cancelled" in _live_region(page, "summary")
    assert "Cancel array" not in _live_region(page, "actions")


def test_the_priority_form_sits_in_its_own_live_region_on_the_job_page(client, setup):
    job = actions.submit_job(setup["carol"], setup["vision"], setup["rc"], form_fields_minimal()).job
    client.force_login(setup["carol"])
    page = client.get(job.get_absolute_url()).content.decode()
    region = _live_region(page, "priority")
    assert 'data-testid="priority-form"' in region
    # The form is not inside a larger live region (which a poll could swap while someone uses it).
    [around] = [live for attrs, live, _ in _Regions(page).elements if attrs.get("data-testid") == "priority-form"]
    assert around == ["priority"]
    actions.cancel_job(setup["carol"], job)
    assert 'data-testid="priority-form"' not in _live_region(
        client.get(job.get_absolute_url()).content.decode(), "priority"
    )
