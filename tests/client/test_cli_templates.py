"""`gpuportal templates …` and `gpuportal submit --template` (issue 35, item 4) against a live portal over HTTP:
alice, lead of vision, saves a job and a spec file as versions of a template, shows and lists them, submits from
the latest and from a named version with a spec file changing a field, and removes it; a notebook's and a service's
templates start a notebook and a service."""

from __future__ import annotations

import re

import yaml

from jobs.models import InferenceService, Job, Notebook, WorkloadTemplate
from tests.factories import inference_service, notebook_session, submit_job

from .conftest import H100


def test_save_list_show_submit_from_and_remove_a_template(portal, gp, people, tmp_path):
    job = submit_job(people["alice"], name="resnet", count=2)
    saved = gp("templates", "save", "resnet", "--from-job", str(job.pk), "--description", "ResNet-50 on ImageNet")
    assert saved.exit_code == 0, saved.output
    assert saved.output.strip() == "Saved job template vision/resnet version 1."
    spec_file = tmp_path / "four.yaml"
    spec_file.write_text(yaml.safe_dump({"name": "resnet", "image": job.image, "command": ["python", "train.py"],
                                         "resource_class": H100, "count": 4}))  # fmt: skip
    assert gp("templates", "save", "resnet", "--spec", str(spec_file)).exit_code == 0
    listed = gp("templates", "list")
    assert listed.exit_code == 0, listed.output
    head, row = (re.split(r"\s{2,}", line.strip()) for line in listed.output.strip().splitlines())
    assert head == ["NAME", "KIND", "VERSION", "SAVED", "DESCRIPTION"] and row[:3] == ["resnet", "job", "2"]
    assert row[-1] == "ResNet-50 on ImageNet"
    shown = gp("templates", "show", "resnet", "--version", "1")
    assert shown.exit_code == 0, shown.output
    assert yaml.safe_load(shown.output)["count"] == 2 and shown.output.startswith("# vision/resnet (job) version 1")

    latest = gp("submit", "--template", "resnet", "--output", "json")
    assert latest.exit_code == 0, latest.output
    change = tmp_path / "change.yaml"
    change.write_text("name: resnet-small\n")
    first = gp("submit", "--template", "resnet@1", str(change))
    assert first.exit_code == 0, first.output
    made = list(Job.objects.exclude(pk=job.pk).order_by("pk"))
    assert [(j.name, j.count) for j in made] == [("resnet", 4), ("resnet-small", 2)]

    unknown = gp("submit", "--template", "nope")
    assert unknown.exit_code == 4 and "No template 'nope'" in unknown.stderr
    assert gp("submit").exit_code == 64  # neither a spec file nor a template
    both = gp("templates", "save", "x")
    assert both.exit_code != 0 and "Give either --from-job ID or --spec FILE (or --from-notebook ID" in both.stderr
    removed = gp("templates", "remove", "resnet")
    assert removed.exit_code == 0 and not WorkloadTemplate.objects.exists()


def test_a_notebooks_and_a_services_templates_start_a_notebook_and_a_service(portal, gp, people, tmp_path):
    notebook = notebook_session(people["alice"], name="scratch", count=2).notebook
    service = inference_service(people["alice"], name="llm", max_replicas=3)
    saved = gp("templates", "save", "lab", "--from-notebook", str(notebook.pk))
    assert saved.output.strip() == "Saved notebook template vision/lab version 1.", saved.output
    assert gp("templates", "save", "llm", "--from-service", str(service.pk)).exit_code == 0
    spec_file = tmp_path / "chat.yaml"
    spec_file.write_text(yaml.safe_dump({"kind": "service", "name": "chat", "image": "vllm/vllm-openai:v0.4.0",
                                         "resource_class": H100, "port": 8000}))  # fmt: skip
    from_file = gp("templates", "save", "chat", "--spec", str(spec_file))
    assert from_file.exit_code == 0 and "Saved service template vision/chat" in from_file.output, from_file.output
    listed = gp("templates", "list")
    rows = [re.split(r"\s{2,}", line.strip())[:3] for line in listed.output.strip().splitlines()[1:]]
    assert rows == [["chat", "service", "1"], ["lab", "notebook", "1"], ["llm", "service", "1"]], listed.output

    launched = gp("submit", "--template", "lab", "--name", "mine")
    assert launched.exit_code == 0, launched.output
    made = Notebook.objects.get(name="mine")
    assert made.count == 2 and launched.output.startswith(f"Notebook #{made.pk} mine (vision")
    started = gp("submit", "--template", "llm@1", "--name", "llm-two", "--output", "json")
    assert started.exit_code == 0, started.output
    assert InferenceService.objects.get(name="llm-two").max_replicas == 3
    # The portal checks the whole again: the template's own name is taken.
    taken = gp("submit", "--template", "lab")
    assert taken.exit_code == 4 and "already has a notebook called scratch" in taken.stderr
    waiting = gp("submit", "--template", "lab", "--name", "x", "--wait")
    assert waiting.exit_code == 64 and "template lab makes a notebook" in waiting.stderr
    assert not Job.objects.filter(kind="batch").exists()  # the notebook and the services only, no job
