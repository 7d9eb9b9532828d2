"""The `gpuportal` command line against a live portal over HTTP: sign-in, submit with --wait and its exit codes,
list/filter, cancel, resubmit with changes, logs, notebooks, and bad spec files."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import yaml

from jobs.models import Job, Notebook

from .conftest import H100

TRAIN = {
    "team": "vision",
    "name": "train",
    "image": "nvcr.io/nvidia/pytorch:24.01-py3",
    "command": ["sleep", "30"],
    "resource_class": H100,
    "env": {"SIM_GPU_LOAD": "train"},
}


def spec_file(tmp_path: Path, filename: str = "job.yaml", **changes) -> str:
    path = tmp_path / filename
    spec = {**TRAIN, **changes}
    path.write_text(json.dumps(spec) if filename.endswith(".json") else yaml.safe_dump(spec))
    return str(path)


def test_login_checks_the_token_and_stores_it_readable_by_the_owner_only(portal, gp, tmp_path):
    result = gp("login", "--url", portal.url, "--token", "-", input=portal.token + "\n", login=False)
    assert result.exit_code == 0, result.output
    assert "Signed in to" in result.output and "as alice (teams: vision)" in result.output
    assert portal.token not in result.output
    config = tmp_path / "gpuportal" / "config"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert portal.token in config.read_text() and portal.url in config.read_text()
    # The stored login is used by later commands with no --url/--token.
    listed = gp("jobs", "list", login=False)
    assert listed.exit_code == 0 and listed.output.strip() == "No jobs."


def test_login_with_a_wrong_token_stores_nothing(portal, gp, tmp_path):
    result = gp("login", "--url", portal.url, "--token", "gpp_deadbeef_nottherealone", login=False)
    assert result.exit_code == 4
    assert "HTTP 401" in result.output and "gpp_deadbeef_nottherealone" not in result.output
    assert not (tmp_path / "gpuportal" / "config").exists()


def test_submit_from_yaml_with_wait_exits_0_when_the_job_succeeds(driven, gp, tmp_path):
    result = gp("submit", spec_file(tmp_path), "--wait")
    assert result.exit_code == 0, result.output
    job = Job.objects.get()
    assert job.state == "succeeded" and job.name == "train" and job.owner.username == "alice"
    assert result.output.splitlines()[0].startswith(f"Submitted Job #{job.pk} train (vision, 1 × ")
    assert result.output.splitlines()[-1].endswith(": Succeeded")
    assert driven.cycles > 0  # the client waited while cycles moved the job along


def test_submit_with_wait_exits_1_when_the_job_fails(driven, gp, tmp_path):
    path = spec_file(tmp_path, "job.json", env={"SIM_EXIT_CODE": "3"})
    result = gp("submit", path, "--wait")
    assert result.exit_code == 1, result.output
    assert Job.objects.get().state == "failed"
    assert "Failed, exit code 3" in result.output.splitlines()[-1]


def test_submit_with_wait_exits_2_when_the_job_is_cancelled_and_3_on_timeout(driven, gp, tmp_path):
    long = spec_file(tmp_path, command=["sleep", "3600"])
    result = gp("submit", long, "--wait", "--timeout", "60")
    assert result.exit_code == 3, result.output
    job = Job.objects.get()
    assert "Gave up waiting" in result.output and job.state == "running"
    assert gp("jobs", "cancel", str(job.pk)).exit_code == 0
    result = gp("jobs", "wait", str(job.pk))
    assert result.exit_code == 2 and result.output.strip().endswith(": Cancelled")


def test_submit_follow_prints_the_log_then_exits_with_the_outcome(driven, gp, tmp_path):
    result = gp("submit", spec_file(tmp_path), "--follow")
    assert result.exit_code == 0, result.output
    job = Job.objects.get()
    kept = job.logs.get().text.splitlines()
    printed = result.stdout.splitlines()
    assert kept and all(line in printed for line in kept)
    assert printed.index(kept[0]) < printed.index(kept[-1])
    assert "finished after" in kept[-1]


def test_a_bad_spec_file_says_every_problem_at_once(portal, gp, tmp_path):
    # An unknown field and three other mistakes: every one of them in one answer (issue 31, item 15).
    path = spec_file(tmp_path, count=0, image="NOT AN IMAGE", name="Bad Name", gpus=4)
    result = gp("submit", path)
    assert result.exit_code == 4
    lines = result.stderr.splitlines()
    assert lines[0] == "The portal refused the request (HTTP 400):"
    assert any(line.startswith("  gpus: Unknown field. A job takes:") for line in lines)
    assert any(line.startswith("  count: ") for line in lines)
    assert any(line.startswith("  image: 'NOT AN IMAGE' is not a container image reference") for line in lines)
    assert any(line.startswith("  name: ") for line in lines)
    assert Job.objects.count() == 0
    # A key that is no class's: the answer names the closest one.
    path = spec_file(tmp_path, resource_class="nvidia.com/gpu@NVIDIA-H100")
    assert f"Did you mean {H100}" in gp("submit", path).stderr
    # A file that is not a spec at all is refused before anything is sent.
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: train\n  image: [unclosed\n")
    result = gp("submit", str(broken))
    assert result.exit_code == 4 and "not valid YAML at line 2" in result.stderr
    listed = tmp_path / "list.yaml"
    listed.write_text("- name: train\n")
    assert "must hold an object of the job's fields" in gp("submit", str(listed)).stderr
    assert "no such file" in gp("submit", str(tmp_path / "missing.yaml")).stderr


def test_list_filters_by_state_and_label_in_table_and_json(driven, gp, tmp_path):
    gp("submit", spec_file(tmp_path, labels={"run": "a"}), "--wait")
    gp("submit", spec_file(tmp_path, name="other", command=["sleep", "3600"], labels={"run": "b"}))
    first, second = Job.objects.order_by("pk")
    table = gp("jobs", "list", "--state", "succeeded").output.splitlines()
    assert table[0].split() == ["ID", "STATE", "KIND", "TEAM", "NAME", "GPUS", "SUBMITTED"]
    assert [row.split()[0] for row in table[1:]] == [str(first.pk)]
    both = json.loads(gp("jobs", "list", "--state", "succeeded", "--state", "queued", "--output", "json").output)
    assert [j["id"] for j in both] == [second.pk, first.pk]
    by_label = json.loads(gp("jobs", "list", "--label", "run=b", "--output", "json").output)
    assert [j["id"] for j in by_label] == [second.pk]
    got = json.loads(gp("jobs", "get", str(second.pk)).output)
    assert got["name"] == "other" and got["labels"] == {"run": "b"}


def test_resubmit_with_changes_makes_a_new_job_with_them(driven, gp, tmp_path):
    gp("submit", spec_file(tmp_path), "--wait")
    old = Job.objects.get()
    result = gp("jobs", "resubmit", str(old.pk), "--set", "count=2", "--set", "image=nvcr.io/nvidia/pytorch:24.02-py3",
                "--set", "preemptible=true", "--wait")  # fmt: skip
    assert result.exit_code == 0, result.output
    new = Job.objects.exclude(pk=old.pk).get()
    assert new.resubmitted_from_id == old.pk and new.count == 2 and new.preemptible
    assert new.image == "nvcr.io/nvidia/pytorch:24.02-py3" and new.state == "succeeded"
    refused = gp("jobs", "resubmit", str(old.pk), "--set", "count=0", "--set", "team=nlp")
    assert refused.exit_code == 4 and "team: A resubmission stays in the job's team." in refused.stderr


def test_logs_of_an_ended_job_print_the_kept_tail(driven, gp, tmp_path):
    gp("submit", spec_file(tmp_path), "--wait")
    job = Job.objects.get()
    result = gp("logs", str(job.pk), "--tail", "2")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == job.logs.get().text.splitlines()[-2:]
    queued = gp("submit", spec_file(tmp_path, name="later"))
    later = Job.objects.get(name="later")
    assert queued.exit_code == 0
    missing = gp("logs", str(later.pk))
    assert missing.exit_code == 4 and f"Job #{later.pk} has no pod yet (queued)." in missing.stderr


def test_notebooks_launch_takes_an_ordered_cluster_list_and_hears_every_problem(driven, gp):
    base = ("notebooks", "launch", "--name", "near", "--resource-class", H100, "--team", "vision")
    refused = gp(*base, "--cluster", "nowhere", "--cluster", "nowhere")
    assert refused.exit_code != 0 and not Notebook.objects.exists()
    assert "No cluster 'nowhere'" in refused.output and "Name each cluster once." in refused.output
    launched = gp(*base, "--cluster", "default")
    assert launched.exit_code == 0, launched.output
    assert Notebook.objects.get().clusters == ["default"]


def test_notebooks_launch_chooses_a_workspace_and_hears_why_one_is_refused(driven, gp, settings):
    base = ("notebooks", "launch", "--name", "editor", "--resource-class", H100, "--team", "vision")
    unknown = gp(*base, "--workspace", "emacs")
    assert unknown.exit_code != 0 and "choose one of jupyter, code-server, rstudio" in unknown.output
    refused = gp(*base, "--workspace", "rstudio")  # token sign-in: RStudio cannot check the token itself
    assert refused.exit_code != 0 and "PORTAL_NOTEBOOK_ACCESS=portal" in refused.output
    assert not Notebook.objects.exists()
    settings.PORTAL_NOTEBOOK_ACCESS = "portal"
    launched = gp(*base, "--workspace", "code-server")
    assert launched.exit_code == 0, launched.output
    notebook = Notebook.objects.get()
    assert f"Notebook #{notebook.pk} editor (vision, code-server): Queued" in launched.output
    assert notebook.workspace == "code-server" and notebook.image == settings.PORTAL_CODE_SERVER_IMAGE


def test_notebooks_launch_stop_start_and_extend(driven, gp, settings):
    settings.PORTAL_NOTEBOOK_EXTEND_SECONDS = 3600
    launched = gp("notebooks", "launch", "--name", "scratch", "--resource-class", H100, "--team", "vision")
    assert launched.exit_code == 0, launched.output
    notebook = Notebook.objects.get()
    assert f"Notebook #{notebook.pk} scratch (vision): Queued" in launched.output
    assert "Notebook login token (shown this once): " in launched.output
    for _ in range(20):
        driven.cycle()
        notebook.session.refresh_from_db()
        if notebook.session.state == "running":
            break
    assert notebook.session.state == "running"
    extended = gp("notebooks", "extend", str(notebook.pk), "--seconds", "600")
    assert extended.exit_code == 0, extended.output
    stopped = gp("notebooks", "stop", str(notebook.pk))
    assert stopped.exit_code == 0 and stopped.output.strip().endswith(": Stopped")
    again = gp("notebooks", "stop", str(notebook.pk))
    assert again.exit_code == 4 and "already stopped" in again.stderr
    started = gp("notebooks", "start", str(notebook.pk))
    assert started.exit_code == 0 and "shown this once" in started.output
    table = gp("notebooks", "list").output.splitlines()
    assert table[0].split()[:5] == ["ID", "NAME", "TEAM", "OWNER", "STATUS"]
    assert table[1].split()[:4] == [str(notebook.pk), "scratch", "vision", "alice"]


def test_usage_errors_exit_64_apart_from_job_outcomes(monkeypatch):
    from gpuportal import cli

    monkeypatch.setattr("sys.argv", ["gpuportal", "jobs", "get"])
    try:
        cli.main()
    except SystemExit as stop:
        assert stop.code == 64
    else:
        raise AssertionError("a missing argument must exit")


def test_services_create_from_a_kind_service_spec_scale_set_image_pause_rollback_delete(driven, gp, tmp_path):
    from jobs.models.service import InferenceService

    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump({
        "kind": "service", "team": "vision", "name": "chat", "image": "vllm/vllm-openai:v0.4.0",
        "resource_class": H100, "count": 1, "cpu": 4, "memory_mb": 16384, "port": 8000,
        "readiness": {"type": "http", "path": "/health"}, "min_replicas": 1, "max_replicas": 3,
    }))  # fmt: skip
    made = gp("services", "create", str(path))
    assert made.exit_code == 0, made.output
    service = InferenceService.objects.get()
    assert f"Service #{service.pk} chat (vision): active" in made.output
    assert "Address: chat.team-vision.svc.cluster.local:8000" in made.output
    listed = gp("services", "list").output.splitlines()
    assert listed[1].split()[:3] == [str(service.pk), "chat", "vision"]
    assert gp("services", "scale", str(service.pk), "--min", "1", "--max", "2").exit_code == 0
    changed = gp("services", "set-image", str(service.pk), "vllm/vllm-openai:v0.5.0")
    assert "revision 2" in changed.output
    assert "paused" in gp("services", "pause", str(service.pk)).output
    assert "active" in gp("services", "resume", str(service.pk)).output
    assert gp("services", "rollback", str(service.pk)).exit_code == 0
    service.refresh_from_db()
    assert (service.max_replicas, service.job.image) == (2, "vllm/vllm-openai:v0.4.0")
    shown = json.loads(gp("services", "get", str(service.pk)).output)
    assert shown["address"]["dns"] == "chat.team-vision.svc.cluster.local:8000"
    assert gp("services", "delete", str(service.pk)).exit_code == 0
    assert InferenceService.objects.get().state == "stopped"
    assert gp("services", "list").output.strip() == "No services."


def test_services_create_says_every_problem_and_refuses_another_kind(portal, gp, tmp_path):
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump({"kind": "service", "team": "vision", "name": "chat", "image": "x/y:1",
                                    "resource_class": H100, "min_replicas": 3, "max_replicas": 2,
                                    "readiness": {"type": "http", "path": "health"}}))  # fmt: skip
    refused = gp("services", "create", str(path))
    assert refused.exit_code != 0
    assert "max_replicas" in refused.stderr and "readiness" in refused.stderr
    path.write_text(yaml.safe_dump({"kind": "batch", "name": "chat", "image": "x/y:1"}))
    wrong = gp("services", "create", str(path))
    assert wrong.exit_code != 0 and "kind: service" in wrong.stderr


def test_a_distributed_spec_runs_whole_and_each_ranks_log_is_readable(driven, gp, tmp_path):
    path = spec_file(tmp_path, name="ddp", kind="distributed", workers=2, count=2)
    result = gp("submit", path, "--wait")
    assert result.exit_code == 0, result.output
    job = Job.objects.get()
    assert (job.kind, job.workers, job.count, job.state) == ("distributed", 2, 2, "succeeded")
    assert len(set(job.node_names)) == 2
    shown = json.loads(gp("jobs", "get", str(job.pk)).output)
    assert shown["total_gpus"] == 4 and [r["rank"] for r in shown["ranks"]] == [0, 1]
    rank1 = gp("logs", str(job.pk), "--rank", "1")
    assert rank1.exit_code == 0, rank1.output
    assert "rank 1/2" in rank1.stdout and "rank 0/2" not in rank1.stdout
    assert "rank 0/2" in gp("logs", str(job.pk)).stdout
    assert gp("logs", str(job.pk), "--rank", "5").exit_code == 4
