"""`gpuportal templates …` and `gpuportal submit --template` (issue 35, item 4) against a live portal over HTTP:
alice, lead of vision, saves a job and a spec file as versions of a template, shows and lists them, submits from
the latest and from a named version with a spec file changing a field, and removes it."""

from __future__ import annotations

import re

import yaml

from jobs.models import Job, WorkloadTemplate
from tests.factories import submit_job

from .conftest import H100


def test_save_list_show_submit_from_and_remove_a_template(portal, gp, people, tmp_path):
    job = submit_job(people["alice"], name="resnet", count=2)
    saved = gp("templates", "save", "resnet", "--from-job", str(job.pk), "--description", "ResNet-50 on ImageNet")
    assert saved.exit_code == 0, saved.output
    assert saved.output.strip() == "Saved template vision/resnet version 1."
    spec_file = tmp_path / "four.yaml"
    spec_file.write_text(yaml.safe_dump({"name": "resnet", "image": job.image, "command": ["python", "train.py"],
                                         "resource_class": H100, "count": 4}))  # fmt: skip
    assert gp("templates", "save", "resnet", "--spec", str(spec_file)).exit_code == 0
    listed = gp("templates", "list")
    assert listed.exit_code == 0, listed.output
    head, row = (re.split(r"\s{2,}", line.strip()) for line in listed.output.strip().splitlines())
    assert head == ["NAME", "VERSION", "SAVED", "DESCRIPTION"] and row[:2] == ["resnet", "2"]
    assert row[-1] == "ResNet-50 on ImageNet"
    shown = gp("templates", "show", "resnet", "--version", "1")
    assert shown.exit_code == 0, shown.output
    assert yaml.safe_load(shown.output)["count"] == 2 and shown.output.startswith("# vision/resnet version 1")

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
    assert both.exit_code != 0 and "Give either --from-job ID or --spec FILE." in both.stderr
    removed = gp("templates", "remove", "resnet")
    assert removed.exit_code == 0 and not WorkloadTemplate.objects.exists()
