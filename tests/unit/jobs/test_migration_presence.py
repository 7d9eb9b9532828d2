"""Migration jobs.0017 is forward-safe on a single-cluster install: every existing volume becomes a claim of the
cluster configured in settings (the row ``default``), every dataset is published there, and a claim name may then
repeat on another cluster."""

import pytest

from tests.migration_steps import migrate_to as migrate

BEFORE = [("jobs", "0015_job_cluster")]
AFTER = [("jobs", "0017_team_presence")]


@pytest.mark.django_db(transaction=True)
def test_existing_volumes_and_datasets_land_on_the_settings_cluster(restores_schema):
    old = migrate(BEFORE)
    team = old.get_model("portal", "Team").objects.create(slug="vision", name="Vision", namespace="team-vision")
    old.get_model("jobs", "TeamVolume").objects.create(team=team, name="checkpoints", phase="Bound")
    dataset = old.get_model("jobs", "Dataset").objects.create(name="imagenet", server="nfs.example", path="/x")
    dataset.teams.add(team)
    new = migrate(AFTER)
    default = new.get_model("gpus", "Cluster").objects.get(name="default")
    volume = new.get_model("jobs", "TeamVolume").objects.get(name="checkpoints")
    assert volume.cluster_id == default.pk
    published = new.get_model("jobs", "Dataset").objects.get(name="imagenet")
    assert list(published.clusters.values_list("name", flat=True)) == ["default"]
    # The same claim name may now exist on another cluster.
    cloud = new.get_model("gpus", "Cluster").objects.create(name="cloud", connection="simulated")
    new.get_model("jobs", "TeamVolume").objects.create(team_id=team.pk, cluster=cloud, name="checkpoints")
    assert new.get_model("jobs", "TeamVolume").objects.filter(name="checkpoints").count() == 2
